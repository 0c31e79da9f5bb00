// The projection helpers of linear.h: the fused path's LinearImpl arithmetic, forward and the
// two halves of backward, shared by swiglu_down and rms_norm_linear.
#include "kernels/linear.h"

#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

namespace odyssey::kernels {

torch::Tensor LinearWeights::dense(torch::ScalarType dtype) const {
  if (quant) return dequantize_4bit(*quant, dtype);
  return weight.to(dtype);
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

torch::Tensor linear_forward(const torch::Tensor& x, const LinearWeights& w, torch::Tensor* lora_out,
                             const torch::Tensor& lora_x) {
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
    *lora_out = at::linear(lora_x.defined() ? lora_x.reshape({-1, lora_x.size(-1)}) : x2, w.lora_a.to(dt));
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
  if (into.defined()) {
    TORCH_CHECK(into.dim() == 2 && into.size(0) == dy.size(0) && into.size(1) == w.in_features(),
                "linear_input_grad: the gradient to add to must be [", dy.size(0), ", ", w.in_features(), "], got ",
                into.sizes());
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
    if (want_a) g.lora_a = at::mm(b.da.t(), x).to(w.lora_a.scalar_type());
    if (want_b) {
      // x A^T as linear_forward computed it, when the forward left it to backward.
      const torch::Tensor a = lora_out.defined()
                                  ? lora_out.reshape({-1, lora_out.size(-1)})
                                  : at::linear(x.reshape({-1, x.size(-1)}), w.lora_a.to(x.scalar_type()));
      // dB = scaling dy^T (x A^T), the scaling applied to the [out, r] product.
      g.lora_b = at::mm(b.dy.t(), a).to(w.lora_b.scalar_type()).mul_(w.lora_scaling);
    }
  }
  return g;
}

}  // namespace odyssey::kernels::detail
