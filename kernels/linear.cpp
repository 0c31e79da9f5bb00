// The projection helpers of linear.h: the fused path's LinearImpl arithmetic, forward and the
// two halves of backward, shared by swiglu_down and rms_norm_linear.
#include "kernels/linear.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/linear_autograd.h"
#include "kernels/lora_dropout_bits.h"

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/lora_dropout_launch.h"
#endif

namespace odyssey::kernels {

torch::Tensor LinearWeights::dense(torch::ScalarType dtype) const {
  if (quant) return dequantize_4bit(*quant, dtype);
  return weight.to(dtype);
}

c10::intrusive_ptr<LoraDropout> LoraDropout::draw(double p) {
  TORCH_CHECK(p > 0.0 && p < 1.0, "LoRA dropout must be in (0, 1), got ", p);
  auto d = c10::make_intrusive<LoraDropout>();
  d->p = p;
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  const std::lock_guard<std::mutex> lock(gen.mutex());
  d->seed = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  d->rows = LoraDropoutRows::current();
  return d;
}

namespace {
thread_local torch::Tensor current_rows;  // LoraDropoutRows' scope on this thread
}  // namespace

LoraDropoutRows::LoraDropoutRows(torch::Tensor rows) : previous_(std::move(current_rows)) {
  TORCH_CHECK(!rows.defined() || (rows.dim() == 1 && rows.scalar_type() == torch::kInt64),
              "LoRA dropout rows must be an int64 vector, got ", rows.sizes(), " ", rows.scalar_type());
  current_rows = rows.defined() ? rows.contiguous() : rows;
}

LoraDropoutRows::~LoraDropoutRows() { current_rows = std::move(previous_); }

torch::Tensor LoraDropoutRows::current() { return current_rows; }

std::int64_t lora_dropout_block_rows(std::int64_t in_features) {
  constexpr std::int64_t kBlockElements = std::int64_t{1} << 26;
  return std::max<std::int64_t>(1, kBlockElements / std::max<std::int64_t>(1, in_features));
}

namespace {

// x (rows row0 … of an [n, in] input, [rows, in], last dimension contiguous) under d's mask
// into out (same sizes; may be x): accumulate false, out = x where kept and 0 where dropped;
// accumulate true, out += scale x where kept. The bits are lora_dropout_bits.h's, on the CPU
// and in the CUDA kernel alike.
void apply_mask(const LoraDropout& d, std::int64_t n, std::int64_t row0, std::int64_t in, const torch::Tensor& x,
                torch::Tensor& out, bool accumulate, double scale) {
  TORCH_CHECK(x.dim() == 2 && out.sizes() == x.sizes() && x.size(1) == in && x.stride(1) == 1 && out.stride(1) == 1 &&
                  x.scalar_type() == out.scalar_type() && x.device() == out.device(),
              "LoRA dropout: the input and output blocks must be [rows, ", in,
              "] of one dtype and device with contiguous rows, got ", x.sizes(), " and ", out.sizes());
  const std::uint64_t seed = d.seed, threshold = dropout_bits::keep_threshold(d.p);
  const std::int64_t rows = x.size(0);
  TORCH_CHECK(row0 >= 0 && row0 + rows <= n, "LoRA dropout: rows ", row0, " + ", rows, " of ", n);
  // The block's rows' positions: d.rows where it covers the input, else the rows' own indices.
  torch::Tensor index;
  if (d.rows.defined() && d.rows.size(0) == n) index = d.rows.narrow(0, row0, rows).to(x.device());
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (x.is_cuda() && supported_dtype(x.scalar_type())) {
    const c10::cuda::CUDAGuard guard(x.device());
    cuda::lora_dropout_apply(x.data_ptr(), x.stride(0), out.data_ptr(), out.stride(0), rows, in, row0,
                             index.defined() ? index.const_data_ptr<std::int64_t>() : nullptr, seed, threshold,
                             accumulate, static_cast<float>(scale), dtype_code(x.scalar_type()),
                             at::cuda::getCurrentCUDAStream().stream());
    return;
  }
#endif
  if (!x.is_cpu()) {  // no kernel for this device or dtype (float64 on a GPU: the selftest's exact runs)
    const torch::Tensor xc = x.cpu().contiguous();
    torch::Tensor oc = accumulate ? out.cpu().contiguous() : at::empty_like(xc);
    LoraDropout dc = d;
    if (index.defined()) dc.rows = d.rows.cpu();
    apply_mask(dc, n, row0, in, xc, oc, accumulate, scale);
    out.copy_(oc);
    return;
  }
  const std::int64_t* ip = index.defined() ? index.const_data_ptr<std::int64_t>() : nullptr;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "lora_dropout", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* op = out.mutable_data_ptr<scalar_t>();
    const std::int64_t ldx = x.stride(0), ldo = out.stride(0);
    const auto s = static_cast<opmath>(scale);
    at::parallel_for(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const std::uint64_t base =
            static_cast<std::uint64_t>(ip != nullptr ? ip[r] : row0 + r) * static_cast<std::uint64_t>(in);
        std::uint64_t quad = ~std::uint64_t{0};
        dropout_bits::Words w{};
        for (std::int64_t c = 0; c < in; ++c) {
          const std::uint64_t e = base + static_cast<std::uint64_t>(c);
          if ((e >> 2) != quad) {
            quad = e >> 2;
            w = dropout_bits::quad(seed, quad);
          }
          const bool keep = dropout_bits::kept(w.w[e & 3], threshold);
          const scalar_t v = xp[r * ldx + c];
          scalar_t& o = op[r * ldo + c];
          if (accumulate) {
            if (keep) o = static_cast<scalar_t>(static_cast<opmath>(o) + s * static_cast<opmath>(v));
          } else {
            o = keep ? v : scalar_t(0);
          }
        }
      }
    });
  });
}

// fn(first_row, rows) for the blocks of lora_dropout_block_rows(in) rows of an [n, in] input,
// in row order.
template <typename Fn>
void for_row_blocks(std::int64_t n, std::int64_t in, Fn&& fn) {
  const std::int64_t block = lora_dropout_block_rows(in);
  for (std::int64_t row = 0; row < n; row += block) fn(row, std::min(block, n - row));
}

// A buffer for one block of rows of an [n, in] input in `options`, of which each block takes
// its first rows.
torch::Tensor block_buffer(std::int64_t n, std::int64_t in, const torch::TensorOptions& options) {
  return at::empty({std::min(n, lora_dropout_block_rows(in)), in}, options);
}

// a^T / (1 - p) in `dtype`: the factor the masked blocks multiply (scaled in a's dtype, then cast).
torch::Tensor dropout_scaled_a(const torch::Tensor& a, const LoraDropout& d, torch::ScalarType dtype) {
  return (a * (1.0 / (1.0 - d.p))).to(dtype).t();
}

// drop(x2) a^T for x2 [N, in] (contiguous rows) and a [r, in] (any float dtype): [N, r] in x2's
// dtype, block by block, each block masked in one pass into a reused buffer. The dropout's
// 1 / (1 - p) goes into the [r, in] factor (dropout_scaled_a), not onto each masked block.
torch::Tensor dropped_product(const torch::Tensor& x2, const torch::Tensor& a, const LoraDropout& d) {
  const std::int64_t n = x2.size(0), in = x2.size(1);
  torch::Tensor out = at::empty({n, a.size(0)}, x2.options());
  const torch::Tensor scaled_t = dropout_scaled_a(a, d, x2.scalar_type());
  torch::Tensor buffer = block_buffer(n, in, x2.options());
  for_row_blocks(n, in, [&](std::int64_t row, std::int64_t rows) {
    torch::Tensor masked = buffer.narrow(0, 0, rows);
    apply_mask(d, n, row, in, x2.narrow(0, row, rows), masked, /*accumulate=*/false, 1.0);
    torch::Tensor part = out.narrow(0, row, rows);
    at::mm_out(part, masked, scaled_t);
  });
  return out;
}

// The rows' last dimension contiguous, as apply_mask reads them.
torch::Tensor with_contiguous_rows(const torch::Tensor& x2) { return x2.stride(1) == 1 ? x2 : x2.contiguous(); }

}  // namespace

torch::Tensor lora_dropout_mask(const LoraDropout& d, std::int64_t n, std::int64_t in,
                                const torch::TensorOptions& options) {
  torch::Tensor out = at::ones({n, in}, options);
  apply_mask(d, n, 0, in, out, out, /*accumulate=*/false, 1.0);
  return out;
}

}  // namespace odyssey::kernels

namespace odyssey::kernels::detail {

void check_linear(const LinearWeights& w, std::int64_t in, const char* what) {
  const std::int64_t out = w.out_features();
  if (w.quant) {
    TORCH_CHECK(!w.weight.defined(), what, ": a projection has a 16-bit or a 4-bit weight, not both");
    TORCH_CHECK(w.quant->shape.size() == 2 && w.quant->shape[1] == in, what, ": the 4-bit weight must be [out, ", in,
                "], got ", c10::IntArrayRef(w.quant->shape));
  } else {
    TORCH_CHECK(w.weight.defined() && w.weight.dim() == 2 && w.weight.size(1) == in, what,
                ": the weight must be [out, ", in, "], got ",
                w.weight.defined() ? w.weight.sizes() : torch::IntArrayRef{});
  }
  TORCH_CHECK(!w.bias.defined() || (w.bias.dim() == 1 && w.bias.size(0) == out), what, ": the bias must be [", out,
              "], got ", w.bias.sizes());
  TORCH_CHECK(w.lora_a.defined() == w.lora_b.defined(), what, ": lora_a and lora_b come together");
  if (w.lora_a.defined())
    TORCH_CHECK(w.lora_a.dim() == 2 && w.lora_a.size(1) == in && w.lora_b.dim() == 2 && w.lora_b.size(0) == out &&
                    w.lora_b.size(1) == w.lora_a.size(0),
                what, ": the LoRA pair must be [r, ", in, "] and [", out, ", r], got ", w.lora_a.sizes(), " and ",
                w.lora_b.sizes());
}

torch::Tensor linear_forward(const torch::Tensor& x, const LinearWeights& w, torch::Tensor* lora_out) {
  // On [N, in]: at::linear of a 3-d input returns a view of its 2-d product, and a custom
  // Function's output that is a view may not be modified in place (RoPE rotates views of the
  // q and k projections in place). _unsafe_view gives the shape without view tracking, as
  // at::matmul does.
  const torch::Tensor x2 = x.reshape({-1, x.size(-1)});
  // A 4-bit base is dequantized here and again in backward (linear_input_grad); the fused
  // ops keep no copy of it.
  const torch::Tensor weight = w.quant ? w.dense(x.scalar_type()) : w.weight;
  torch::Tensor y;
  if (w.lora_a.defined()) {
    const auto dt = x.scalar_type();
    *lora_out =
        w.dropout ? dropped_product(with_contiguous_rows(x2), w.lora_a, *w.dropout) : at::linear(x2, w.lora_a.to(dt));
    // The adapter's r-wide product first, written once into the output (the scaling as alpha,
    // the bias, if any, as its C), then the base GEMM adds itself onto it (beta = 1). A GEMM
    // of inner size r is bound by memory and the base one by compute, which reads C under its
    // arithmetic: this order passes over [N, out] once in the bandwidth-bound product, where
    // the base first and the adapter's addmm onto it read and wrote it (3.25 GB a layer for
    // the 7B shape at 32K). PEFT's y + B(A(x)) * scaling writes three [N, out] temporaries.
    const torch::Tensor bt = w.lora_b.to(dt).t();
    if (w.bias.defined()) {
      y = at::addmm(w.bias, *lora_out, bt, /*beta=*/1, /*alpha=*/w.lora_scaling);
    } else {
      y = at::empty({x2.size(0), w.out_features()}, x2.options());
      y.addmm_(*lora_out, bt, /*beta=*/0, /*alpha=*/w.lora_scaling);  // beta 0: y's contents never read
    }
    y.addmm_(x2, weight.t());
  } else {
    y = at::linear(x2, weight, w.bias.defined() ? std::optional<torch::Tensor>(w.bias) : std::nullopt);
  }
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = w.out_features();
  return at::_unsafe_view(y, shape);
}

LinearBackward linear_input_grad(const torch::Tensor& dy, const LinearWeights& w, torch::ScalarType dtype,
                                 const torch::Tensor& into) {
  LinearBackward b;
  b.dy = dy;
  const torch::Tensor weight = w.quant ? w.dense(dy.scalar_type()) : w.weight;
  // The scaling goes into the small factor: d(x A^T) = dy (scaling B), not (scaling dy) B,
  // which would write and read an [N, out] copy of dy.
  if (w.lora_a.defined()) b.da = at::mm(dy, (w.lora_b * w.lora_scaling).to(dtype));
  if (into.defined())
    TORCH_CHECK(into.dim() == 2 && into.size(0) == dy.size(0) && into.size(1) == w.in_features(),
                "linear_input_grad: the gradient to add to must be [", dy.size(0), ", ", w.in_features(), "], got ",
                into.sizes());
  if (b.da.defined() && w.dropout) {
    // d drop(x) = da A, masked and scaled, block by block onto the base GEMM's dy W.
    b.input_grad = into.defined() ? into.addmm_(dy, weight) : at::mm(dy, weight);
    const torch::Tensor a = w.lora_a.to(dtype);
    const double scale = 1.0 / (1.0 - w.dropout->p);
    const std::int64_t n = dy.size(0), in = w.in_features();
    torch::Tensor buffer = block_buffer(n, in, b.input_grad.options());
    for_row_blocks(n, in, [&](std::int64_t row, std::int64_t rows) {
      torch::Tensor product = buffer.narrow(0, 0, rows);
      at::mm_out(product, b.da.narrow(0, row, rows), a);
      torch::Tensor part = b.input_grad.narrow(0, row, rows);
      apply_mask(*w.dropout, n, row, in, product, part, /*accumulate=*/true, scale);
    });
  } else if (into.defined()) {
    b.input_grad = into.addmm_(dy, weight);
    if (b.da.defined()) b.input_grad.addmm_(b.da, w.lora_a.to(dtype));
  } else if (b.da.defined()) {
    // As linear_forward: the adapter's r-wide product writes the gradient, the base GEMM adds
    // onto it (one pass over [N, in] in a bandwidth-bound GEMM instead of three).
    b.input_grad = at::mm(b.da, w.lora_a.to(dtype));
    b.input_grad.addmm_(dy, weight);
  } else {
    b.input_grad = at::mm(dy, weight);
  }
  return b;
}

namespace {

// A vector of n ones like `like` (device, dtype): a view of one cached vector per (device,
// dtype) that grows to the longest n asked, so the bias products of a step fill none (72
// fill kernels a step for Qwen 0.5B's q/k/v biases before). Never freed: a few hundred KB
// per device, and no CUDA free after the allocator's teardown at exit.
torch::Tensor ones_like_rows(std::int64_t n, const torch::Tensor& like) {
  static std::mutex mutex;
  static auto* cache = new std::map<std::tuple<int, int, int>, torch::Tensor>();
  const std::lock_guard<std::mutex> lock(mutex);
  torch::Tensor& t =
      (*cache)[{static_cast<int>(like.device().type()), like.device().index(), static_cast<int>(like.scalar_type())}];
  if (!t.defined() || t.size(0) < n) t = at::ones({n}, like.options());
  return t.narrow(0, 0, n);
}

}  // namespace

LinearGrads linear_weight_grads(const LinearBackward& b, const torch::Tensor& x, const torch::Tensor& lora_out,
                                const LinearWeights& w, bool want_weight, bool want_bias, bool want_a, bool want_b) {
  LinearGrads g;
  TORCH_CHECK(!want_weight || !w.quant, "linear_weight_grads: a 4-bit base weight is frozen (QLoRA)");
  if (want_weight) g.weight = at::mm(b.dy.t(), x);
  // On the GPU in bf16/fp16 the bias's gradient (Σ over rows of dy) as a matrix-vector product:
  // cuBLAS reads the [N, out] gradient once at full bandwidth, where a column reduction kernel
  // took 2.5x as long (qkv biases, Qwen 0.5B at 32K: 72 reductions, 2.8 ms of a 600 ms step);
  // fp32 accumulation either way, then one rounding. In fp32 the reduction's tree order is more
  // accurate than the product's (selftest: 4.3e-7 against 1.3e-7 over 2048 rows), so it stays.
  const bool half = b.dy.scalar_type() == torch::kBFloat16 || b.dy.scalar_type() == torch::kHalf;
  if (want_bias) g.bias = b.dy.is_cuda() && half ? at::mv(b.dy.t(), ones_like_rows(b.dy.size(0), b.dy)) : b.dy.sum(0);
  if (w.lora_a.defined()) {
    const torch::Tensor x2 = x.defined() ? x.reshape({-1, x.size(-1)}) : x;
    // With dropout, one walk over the mask's blocks serves both: dA = da^T drop(x), each block's
    // da^T (mask x) summed in fp32 (one rounding per block, the 1 / (1 - p) applied once to the
    // sum), and x A^T where the forward left it to backward (rms_norm_mlp's skip_output), block
    // by block as dropped_product computes it (the same bits).
    torch::Tensor lora_x = lora_out.defined() ? lora_out.reshape({-1, lora_out.size(-1)}) : torch::Tensor();
    const bool redo_lora_x = want_b && !lora_x.defined();
    if (w.dropout && (want_a || redo_lora_x)) {
      torch::Tensor ga, scaled_t;
      if (want_a) ga = at::zeros(w.lora_a.sizes(), x2.options().dtype(torch::kFloat32));
      if (redo_lora_x) {
        lora_x = at::empty({x2.size(0), w.lora_a.size(0)}, x2.options());
        scaled_t = dropout_scaled_a(w.lora_a, *w.dropout, x2.scalar_type());
      }
      const torch::Tensor xr = with_contiguous_rows(x2);
      const std::int64_t n = xr.size(0), in = xr.size(1);
      torch::Tensor buffer = block_buffer(n, in, xr.options());
      for_row_blocks(n, in, [&](std::int64_t row, std::int64_t rows) {
        torch::Tensor masked = buffer.narrow(0, 0, rows);
        apply_mask(*w.dropout, n, row, in, xr.narrow(0, row, rows), masked, /*accumulate=*/false, 1.0);
        if (want_a) ga.add_(at::mm(b.da.narrow(0, row, rows).t(), masked).to(torch::kFloat32));
        if (redo_lora_x) {
          torch::Tensor part = lora_x.narrow(0, row, rows);
          at::mm_out(part, masked, scaled_t);
        }
      });
      if (want_a) g.lora_a = ga.mul_(1.0 / (1.0 - w.dropout->p)).to(w.lora_a.scalar_type());
    } else if (want_a) {
      g.lora_a = at::mm(b.da.t(), x2).to(w.lora_a.scalar_type());
    }
    if (want_b) {
      // x A^T as linear_forward computed it, when the forward left it to backward.
      if (!lora_x.defined()) lora_x = at::linear(x2, w.lora_a.to(x2.scalar_type()));
      // dB = scaling dy^T (x A^T), the scaling applied to the [out, r] product.
      g.lora_b = at::mm(b.dy.t(), lora_x).to(w.lora_b.scalar_type()).mul_(w.lora_scaling);
    }
  }
  return g;
}

}  // namespace odyssey::kernels::detail

namespace odyssey::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// linear_forward under a Function: saved are x, the weights and the r-wide lora_a output.
struct LinearFunction : torch::autograd::Function<LinearFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const std::optional<torch::Tensor>& bias, const std::optional<torch::Tensor>& lora_a,
                               const std::optional<torch::Tensor>& lora_b, double scaling,
                               const c10::intrusive_ptr<Quant4Weight>& quant,
                               const c10::intrusive_ptr<LoraDropout>& dropout) {
    const LinearWeights w = detail::weights_of(weight, bias, lora_a, lora_b, scaling, quant, dropout);
    torch::Tensor a;
    const torch::Tensor y = detail::linear_forward(x, w, &a);
    ctx->save_for_backward({x, w.weight, w.lora_a, w.lora_b, a});
    detail::remember_linear(ctx, w);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const LinearWeights w = detail::saved_weights(ctx, saved[1], saved[2], saved[3]);
    const detail::LinearWants want = detail::linear_wants(ctx, /*first_edge=*/1, w);
    const torch::Tensor dy = grads[0].reshape({-1, w.out_features()});
    const detail::LinearBackward b = detail::linear_input_grad(dy, w, x.scalar_type());
    const detail::LinearGrads g = detail::weight_grads(b, x.reshape({-1, x.size(-1)}), saved[4], w, want);
    return {b.input_grad.view(x.sizes()),
            g.weight,
            g.bias,
            g.lora_a,
            g.lora_b,
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor linear(const torch::Tensor& x, const LinearWeights& w) {
  TORCH_CHECK(x.defined() && x.dim() >= 1, "linear: the input must be [..., in]");
  detail::check_linear(w, x.size(-1), "linear");
  return LinearFunction::apply(x, detail::weight_arg(w), detail::opt(w.bias), detail::opt(w.lora_a),
                               detail::opt(w.lora_b), w.lora_scaling, w.quant, w.dropout)[0];
}

}  // namespace odyssey::kernels
