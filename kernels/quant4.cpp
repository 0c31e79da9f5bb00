// bitsandbytes-layout 4-bit quantization (quant4.h) in ATen ops. Each step is the fp32
// operation bitsandbytes 0.50's CPU path performs, in the same order, so the bytes and the
// constants are bit-identical to its quantize_4bit (tests/kernels/tst_quant4.cpp).
#include "kernels/quant4.h"
#include "kernels/dtype.h"
#include "kernels/quant4_ref.h"

#include <array>

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/quant4_launch.h"
#endif

namespace odyssey::kernels {

namespace {

// NF4: the 16 values of the QLoRA paper's NormalFloat (normal quantiles with an exact zero,
// normalized to [-1, 1]), as fp32.
constexpr std::array<float, 16> kNf4 = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// FP4 (e2m1, exponent bias 2), indexed by the code's bits: sign, then the 3 magnitude bits
// whose values are 0, 0.0625, 8, 12, 4, 6, 2, 3; divided by the largest, 12.
constexpr std::array<float, 8> kFp4Magnitude = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f};

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

}  // namespace

const char* quant4_type_name(Quant4Type t) { return t == Quant4Type::NF4 ? "nf4" : "fp4"; }

std::optional<Quant4Type> parse_quant4_type(const std::string& s) {
  if (s == "nf4") return Quant4Type::NF4;
  if (s == "fp4") return Quant4Type::FP4;
  return std::nullopt;
}

bool valid_quant4_blocksize(std::int64_t b) { return b >= 32 && b <= 4096 && (b & (b - 1)) == 0; }

std::int64_t Quant4Weight::numel() const { return numel_of(shape); }

std::int64_t Quant4Weight::blocks() const { return (numel() + blocksize - 1) / blocksize; }

std::int64_t Quant4Weight::nbytes() const {
  std::int64_t n = 0;
  for (const torch::Tensor* t : {&packed, &code, &absmax, &nested_absmax, &nested_code})
    if (t->defined()) n += t->numel() * static_cast<std::int64_t>(t->element_size());
  return n;
}

c10::intrusive_ptr<Quant4Weight> Quant4Weight::to(const torch::Device& d) const {
  auto q = c10::make_intrusive<Quant4Weight>(*this);
  for (torch::Tensor* t : {&q->packed, &q->code, &q->absmax, &q->nested_absmax, &q->nested_code})
    if (t->defined()) *t = t->to(d);
  return q;
}

torch::Tensor quant4_code(Quant4Type t, const torch::Device& device) {
  std::vector<float> v(16);
  if (t == Quant4Type::NF4) {
    std::copy(kNf4.begin(), kNf4.end(), v.begin());
  } else {
    for (int i = 0; i < 8; ++i) {
      v[static_cast<std::size_t>(i)] = kFp4Magnitude[static_cast<std::size_t>(i)];
      v[static_cast<std::size_t>(i + 8)] = -kFp4Magnitude[static_cast<std::size_t>(i)];
    }
    v[8] = 0.0f;  // the negative zero code holds +0, as bitsandbytes' table does (its dequantized zeros are +0)
  }
  torch::Tensor code = torch::tensor(v, torch::kFloat32);
  code.div_(code.abs().max());  // bitsandbytes normalizes the table by its largest magnitude
  return code.to(device);
}

torch::Tensor dynamic_map_signed(const torch::Device& device) {
  // 7 exponent ranges 10^-6 … 10^0; range i holds 2^i linearly spaced fractions in (0.1, 1)
  // (the means of 2^i + 1 fp32 linspace boundaries) scaled by 10^(i-6), with both signs;
  // then 0 and 1: 2 × 127 + 2 = 256 values, sorted. The products are fp32, as in
  // bitsandbytes' create_dynamic_map.
  std::vector<torch::Tensor> parts;
  for (int i = 0; i < 7; ++i) {
    const torch::Tensor boundaries = torch::linspace(0.1, 1.0, (1 << i) + 1, torch::kFloat32);
    const torch::Tensor means = (boundaries.narrow(0, 0, 1 << i) + boundaries.narrow(0, 1, 1 << i)) / 2.0;
    const double scale = std::pow(10.0, i - 6);
    parts.push_back(means * scale);
    parts.push_back(means * (-scale));
  }
  parts.push_back(torch::tensor({0.0f, 1.0f}, torch::kFloat32));
  torch::Tensor data = std::get<0>(torch::cat(parts).sort());
  return data.to(device);
}

std::pair<torch::Tensor, torch::Tensor> quantize_blockwise_8bit(const torch::Tensor& x, const torch::Tensor& code,
                                                                std::int64_t blocksize) {
  TORCH_CHECK(blocksize > 0, "quantize_blockwise_8bit: blocksize must be positive");
  TORCH_CHECK(code.dim() == 1 && code.size(0) >= 2, "quantize_blockwise_8bit: the code must be a vector");
  const torch::Tensor a = x.reshape(-1).to(torch::kFloat32);
  const std::int64_t n = a.numel();
  const std::int64_t blocks = (n + blocksize - 1) / blocksize;
  const std::int64_t padded = blocks * blocksize;
  // Per block: the largest magnitude (padding with 0 changes no maximum), each value divided
  // by it, then the nearest code value (a search for the code at or left of the value, then
  // its right neighbour taken only when strictly closer).
  const torch::Tensor blocked = torch::constant_pad_nd(a, {0, padded - n}, 0.0).view({blocks, blocksize});
  const torch::Tensor absmax = blocked.abs().amax(1);
  const torch::Tensor normed = (blocked / absmax.unsqueeze(1)).reshape(-1).narrow(0, 0, n);
  const torch::Tensor c = code.to(a.device(), torch::kFloat32).contiguous();
  const std::int64_t last = c.size(0) - 1;
  torch::Tensor idx = (torch::searchsorted(c, normed, /*out_int32=*/false, /*right=*/true) - 1).clamp(0, last);
  const torch::Tensor next = (idx + 1).clamp_max(last);
  const torch::Tensor dl = (normed - c.index_select(0, idx)).abs();
  const torch::Tensor dr = (normed - c.index_select(0, next)).abs();
  idx = torch::where(dr < dl, next, idx);
  idx = torch::where(torch::isnan(normed), torch::zeros_like(idx), idx);  // an all-zero block: 0/0
  return {idx.to(torch::kUInt8).view(x.sizes()), absmax};
}

c10::intrusive_ptr<Quant4Weight> quantize_4bit(const torch::Tensor& w, Quant4Type type, std::int64_t blocksize,
                                               bool double_quant) {
  TORCH_CHECK(valid_quant4_blocksize(blocksize), "quantize_4bit: blocksize ", blocksize,
              " is not one bitsandbytes uses (32, 64, ..., 4096)");
  const auto st = w.scalar_type();
  TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
              "quantize_4bit: the weight must be fp32, bf16 or fp16, got ", st);
  TORCH_CHECK(w.numel() > 0, "quantize_4bit: empty weight");
  torch::NoGradGuard no_grad;
  const torch::Device dev = w.device();
  const torch::Tensor flat = w.detach().reshape(-1);
  const std::int64_t n = flat.numel();
  const torch::Tensor code = quant4_code(type, dev);
  const torch::Tensor order = torch::argsort(code);
  const torch::Tensor sorted = code.index_select(0, order);
  const torch::Tensor bounds = (sorted.narrow(0, 0, 15) + sorted.narrow(0, 1, 15)) / 2;

  // In chunks of whole blocks (2^24 values): the working set (fp32 copy, scaled values, int64
  // codes) is about 20 bytes a value, 8 GB for one layer's stacked experts of Qwen3-30B-A3B
  // at once. Blocks are independent, so the bytes are those of one pass.
  const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t{1} << 24) / blocksize) * blocksize;
  std::vector<torch::Tensor> absmax_parts, packed_parts;
  for (std::int64_t start = 0; start < n; start += chunk) {
    const torch::Tensor a = flat.narrow(0, start, std::min(chunk, n - start)).to(torch::kFloat32);
    const std::int64_t len = a.numel(), rem = len % blocksize, full = len - rem, full_blocks = full / blocksize;

    // Full blocks: x · (1 / max(absmax, 1e-38)), clamped to [-1, 1]; the stored absmax is the
    // unclamped maximum. A short last block: x / max(absmax, 1e-38), and that clamped maximum
    // is what is stored. (bitsandbytes' two code paths, kept apart on purpose.)
    std::vector<torch::Tensor> scaled_parts;
    if (full_blocks > 0) {
      const torch::Tensor blocked = a.narrow(0, 0, full).view({full_blocks, blocksize});
      const torch::Tensor am = std::get<0>(blocked.abs().max(1));
      absmax_parts.push_back(am);
      scaled_parts.push_back((blocked * torch::reciprocal(am.clamp_min(1e-38)).unsqueeze(1)).clamp(-1, 1).reshape(-1));
    }
    if (rem > 0) {  // only in the last chunk
      const torch::Tensor tail = a.narrow(0, full, rem);
      const torch::Tensor am = tail.abs().max().clamp_min(1e-38);
      absmax_parts.push_back(am.unsqueeze(0));
      scaled_parts.push_back((tail / am).clamp(-1, 1));
    }
    torch::Tensor scaled = scaled_parts.size() == 1 ? scaled_parts.front() : torch::cat(scaled_parts);
    if (scaled.numel() % 2) scaled = torch::constant_pad_nd(scaled, {0, 1}, 0.0);

    // Nearest code: bucketize against the midpoints of the ascending values (a value on a
    // midpoint goes to the lower one); FP4's codes are not in value order, so map back.
    torch::Tensor q = torch::bucketize(scaled, bounds, /*out_int32=*/false, /*right=*/false);
    if (type != Quant4Type::NF4) q = order.index_select(0, q);
    const torch::Tensor q8 = q.to(torch::kUInt8).view({-1, 2});
    packed_parts.push_back(torch::bitwise_or(torch::bitwise_left_shift(q8.select(1, 0), 4), q8.select(1, 1)));
  }
  torch::Tensor absmax = absmax_parts.size() == 1 ? absmax_parts.front() : torch::cat(absmax_parts);
  const torch::Tensor packed = packed_parts.size() == 1 ? packed_parts.front() : torch::cat(packed_parts);

  auto out = c10::make_intrusive<Quant4Weight>();
  out->type = type;
  out->blocksize = blocksize;
  out->shape = w.sizes().vec();
  out->dtype = st;
  out->packed = packed.unsqueeze(1).contiguous();
  out->code = code;
  if (!double_quant) {
    out->absmax = absmax;
    return out;
  }
  // Double quantization: the absmax values less their mean, 8-bit on the dynamic map.
  const torch::Tensor offset = absmax.mean();
  auto [qabsmax, nested_absmax] = quantize_blockwise_8bit(absmax - offset, dynamic_map_signed(dev), 256);
  out->nested = true;
  out->nested_blocksize = 256;
  out->absmax = qabsmax;
  out->nested_absmax = nested_absmax;
  out->nested_code = dynamic_map_signed(dev);
  out->offset = offset.item<float>();
  return out;
}

torch::Tensor quant4_absmax(const Quant4Weight& q) {
  if (!q.nested) return q.absmax.to(torch::kFloat32);
  const std::int64_t blocks = q.absmax.numel(), nb = q.nested_blocksize;
  const torch::Tensor values = q.nested_code.to(torch::kFloat32).index_select(0, q.absmax.reshape(-1).to(torch::kLong));
  const torch::Tensor scale = q.nested_absmax.to(torch::kFloat32).repeat_interleave(nb).narrow(0, 0, blocks);
  return values * scale + q.offset;
}

c10::intrusive_ptr<Quant4Weight> slice_4bit(const Quant4Weight& q, std::int64_t first, std::int64_t count) {
  TORCH_CHECK(!q.shape.empty() && q.shape[0] > 0, "slice_4bit: a weight with a first dimension is needed");
  TORCH_CHECK(first >= 0 && count > 0 && first + count <= q.shape[0], "slice_4bit: rows ", first, "..",
              first + count - 1, " of ", q.shape[0]);
  const std::int64_t per = q.numel() / q.shape[0];
  TORCH_CHECK(per % q.blocksize == 0, "slice_4bit: a row of ", per, " values is not whole blocks of ", q.blocksize,
              " (its blocks would straddle the cut)");
  auto s = c10::make_intrusive<Quant4Weight>();
  s->type = q.type;
  s->blocksize = q.blocksize;
  s->dtype = q.dtype;
  s->shape = q.shape;
  s->shape[0] = count;
  s->code = q.code;
  s->packed = q.packed.reshape({-1}).narrow(0, first * per / 2, count * per / 2).clone().view({-1, 1});
  s->absmax = quant4_absmax(q).narrow(0, first * per / q.blocksize, count * per / q.blocksize).clone();
  return s;
}

torch::Tensor dequantize_4bit(const Quant4Weight& q, torch::ScalarType dtype) {
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (q.packed.is_cuda() && (dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kHalf)) {
    const c10::cuda::CUDAGuard guard(q.packed.device());
    torch::Tensor out = torch::empty(q.shape, q.packed.options().dtype(dtype));
    const torch::Tensor code = q.code.to(torch::kFloat32).contiguous();
    const torch::Tensor packed = q.packed.contiguous();
    torch::Tensor absmax = q.absmax.contiguous(), nested_absmax, nested_code;
    if (q.nested) {
      nested_absmax = q.nested_absmax.to(torch::kFloat32).contiguous();
      nested_code = q.nested_code.to(torch::kFloat32).contiguous();
    } else {
      absmax = absmax.to(torch::kFloat32);
    }
    cuda::dequantize_4bit(
        packed.data_ptr<std::uint8_t>(), code.data_ptr<float>(), q.nested ? nullptr : absmax.data_ptr<float>(),
        q.nested ? absmax.data_ptr<std::uint8_t>() : nullptr, q.nested ? nested_code.data_ptr<float>() : nullptr,
        q.nested ? nested_absmax.data_ptr<float>() : nullptr, q.offset, q.nested_blocksize, q.numel(), q.blocksize,
        out.data_ptr(), dtype_code(dtype), at::cuda::getCurrentCUDAStream().stream());
    return out;
  }
#endif
  return dequantize_4bit_reference(q, dtype);
}

torch::Tensor dequantize_4bit_reference(const Quant4Weight& q, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  const std::int64_t n = q.numel();
  const torch::Tensor bytes = q.packed.reshape(-1);
  // High nibble first: element 2i in the high half of byte i.
  const torch::Tensor nibbles = torch::stack({torch::bitwise_right_shift(bytes, 4), torch::bitwise_and(bytes, 15)}, 1)
                                    .reshape(-1)
                                    .narrow(0, 0, n);
  const torch::Tensor values = q.code.to(torch::kFloat32).index_select(0, nibbles.to(torch::kLong));
  const torch::Tensor absmax = quant4_absmax(q);
  const std::int64_t rem = n % q.blocksize, full = n - rem;
  torch::Tensor out;
  if (rem == 0) {
    out = (values.view({-1, q.blocksize}) * absmax.unsqueeze(1)).reshape(-1);
  } else {
    std::vector<torch::Tensor> parts;
    if (full > 0)
      parts.push_back(
          (values.narrow(0, 0, full).view({-1, q.blocksize}) * absmax.narrow(0, 0, full / q.blocksize).unsqueeze(1))
              .reshape(-1));
    parts.push_back(values.narrow(0, full, rem) * absmax.narrow(0, full / q.blocksize, 1));
    out = torch::cat(parts);
  }
  return out.view(q.shape).to(dtype);
}

}  // namespace odyssey::kernels

namespace odyssey::kernels {

namespace {

// y = x W^T with W dequantized for the product and again in backward; W is held by a
// capsule, not saved as a tensor, so autograd keeps nothing of W's size (W frozen: no weight
// gradient).
struct Quant4Linear : torch::autograd::Function<Quant4Linear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const c10::intrusive_ptr<Quant4Weight>& w) {
    ctx->saved_data["w"] = c10::IValue::make_capsule(w);
    return at::linear(x, dequantize_4bit(*w, x.scalar_type()));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto w = c10::static_intrusive_pointer_cast<Quant4Weight>(ctx->saved_data["w"].toCapsule());
    const torch::Tensor& dy = grads[0];
    torch::Tensor dx;
    if (ctx->needs_input_grad(0)) dx = at::matmul(dy, dequantize_4bit(*w, dy.scalar_type()));
    return {dx, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor quant4_linear(const torch::Tensor& x, const c10::intrusive_ptr<Quant4Weight>& w,
                            const torch::Tensor& bias) {
  TORCH_CHECK(w && w->shape.size() == 2, "quant4_linear: a 2-d 4-bit weight is needed");
  TORCH_CHECK(x.size(-1) == w->shape[1], "quant4_linear: input of ", x.size(-1), " features for a weight [",
              w->shape[0], ", ", w->shape[1], "]");
  TORCH_CHECK(x.device() == w->device(), "quant4_linear: the input is on ", x.device(), ", the weight on ",
              w->device());
  torch::Tensor y = Quant4Linear::apply(x, w);
  return bias.defined() ? y + bias : y;
}

}  // namespace odyssey::kernels
