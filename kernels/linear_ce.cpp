// Fused linear cross-entropy (kernels/linear_ce.h): chunked logits, the per-row
// softmax/loss/gradient step (CUDA kernel or ATen ops), and the gradients of hidden and
// weight formed in the forward pass; backward only scales them by the incoming gradient.
//
// Memory (T tokens, H hidden, V vocabulary, C = rows per chunk, `dt` = the inputs' dtype):
//  * held from forward to backward (saved in the autograd node, freed after backward):
//      dhidden [T, H] in dt            when hidden requires grad,
//      dweight [V, H] fp32             when the weight requires grad;
//    nothing when no gradient is wanted (NoGradGuard, or neither input requires grad).
//  * transient in forward: one chunk of logits [C, V] in dt, overwritten by its gradient;
//    the per-row losses [T] fp32; and
//      - CUDA: nothing else (a training 16-bit weight's gradient is one cublasGemmEx per
//        chunk accumulating into the fp32 dweight; only if cuBLAS's GemmEx cannot be found,
//        the fp32 product gᵀ·h_c of one vocabulary slice, at most max(C·V, 2^22) elements);
//      - ATen row step (non-CUDA tensors): the chunk upcast to fp32 and its softmax, 2·C·V
//        fp32 (the upcast is free for fp32); with a training 16-bit weight, the chunk's
//        gradient and h_c upcast to fp32 again (C·V + C·H) for the dweight product.
//  * transient in backward: the returned gradients ([T, H] in dt, [V, H] in the weight's
//    dtype) and, for 16-bit outputs, an fp32 slice of at most 2^22 elements.
// Never a [T, V] tensor. C defaults to max(1, 2^26 / V) (a 256 MiB fp32 chunk).
#include "kernels/linear_ce.h"

#include <algorithm>
#include <limits>
#include <vector>

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include "kernels/linear_ce_launch.h"
#endif

namespace odyssey::kernels {
namespace {

using torch::Tensor;

constexpr std::int64_t kDefaultChunkLogits = std::int64_t{1} << 26;
constexpr std::int64_t kSliceElements = std::int64_t{1} << 22;  // fp32 temporaries of dweight / backward

void check_inputs(const Tensor& hidden, const Tensor& weight, const Tensor& targets, const LinearCeOptions& options) {
  TORCH_CHECK(hidden.defined() && weight.defined() && targets.defined(),
              "linear_cross_entropy: hidden, weight and targets must all be defined tensors");
  TORCH_CHECK(hidden.dim() == 2, "linear_cross_entropy: hidden must be 2-D [T, H], got shape ", hidden.sizes());
  TORCH_CHECK(weight.dim() == 2, "linear_cross_entropy: weight must be 2-D [V, H], got shape ", weight.sizes());
  TORCH_CHECK(targets.dim() == 1, "linear_cross_entropy: targets must be 1-D [T], got shape ", targets.sizes());
  TORCH_CHECK(weight.size(1) == hidden.size(1), "linear_cross_entropy: weight ", weight.sizes(), " and hidden ",
              hidden.sizes(), " disagree on H (weight.size(1) must equal hidden.size(1))");
  TORCH_CHECK(targets.size(0) == hidden.size(0), "linear_cross_entropy: targets has ", targets.size(0),
              " entries but hidden has ", hidden.size(0), " rows");
  TORCH_CHECK(weight.size(0) > 0, "linear_cross_entropy: weight has no rows (vocabulary size 0)");
  const auto dt = hidden.scalar_type();
  TORCH_CHECK(dt == torch::kFloat32 || dt == torch::kBFloat16 || dt == torch::kFloat16,
              "linear_cross_entropy: hidden dtype must be float32, bfloat16 or float16, got ", dt);
  TORCH_CHECK(weight.scalar_type() == dt, "linear_cross_entropy: weight dtype ", weight.scalar_type(),
              " differs from hidden dtype ", dt, " (they must be equal)");
  TORCH_CHECK(targets.scalar_type() == torch::kInt64, "linear_cross_entropy: targets dtype must be int64, got ",
              targets.scalar_type());
  TORCH_CHECK(weight.device() == hidden.device() && targets.device() == hidden.device(),
              "linear_cross_entropy: hidden (", hidden.device(), "), weight (", weight.device(), ") and targets (",
              targets.device(), ") must be on one device");
  TORCH_CHECK(options.chunk_tokens >= 0, "linear_cross_entropy: chunk_tokens must be >= 0 (0: automatic), got ",
              options.chunk_tokens);
}

struct Plan {
  std::int64_t chunk = 1;
  std::vector<std::int64_t> counted;  // per chunk: how many targets are not ignore_index
};

// Chunking and target validation. One device→host copy (one synchronisation) per call:
// the number of bad targets and each chunk's number of counted targets; a second one only
// on the error path, to name the first bad target.
Plan make_plan(const Tensor& targets, std::int64_t vocab, const LinearCeOptions& options) {
  const std::int64_t t = targets.size(0);
  Plan plan;
  plan.chunk = options.chunk_tokens > 0 ? options.chunk_tokens : std::max<std::int64_t>(1, kDefaultChunkLogits / vocab);
  plan.chunk = std::max<std::int64_t>(1, std::min(plan.chunk, t));
  const std::int64_t chunks = (t + plan.chunk - 1) / plan.chunk;
  const Tensor counted = targets.ne(options.ignore_index);
  const Tensor bad = counted.logical_and(targets.lt(0).logical_or(targets.ge(vocab)));
  const Tensor per_chunk =
      at::constant_pad_nd(counted.to(torch::kInt64), {0, chunks * plan.chunk - t}).view({chunks, plan.chunk}).sum(1);
  const Tensor host = at::cat({bad.sum().view({1}), per_chunk}).to(torch::kCPU).contiguous();
  const auto* h = host.data_ptr<std::int64_t>();
  if (h[0] > 0) {
    const std::int64_t where = bad.nonzero()[0][0].item<std::int64_t>();
    TORCH_CHECK(false, "linear_cross_entropy: targets[", where, "] = ", targets[where].item<std::int64_t>(),
                " is outside [0, ", vocab, ") (the vocabulary, weight.size(0)) and is not ignore_index (",
                options.ignore_index, "); ", h[0], " such target(s)");
  }
  plan.counted.assign(h + 1, h + 1 + chunks);
  return plan;
}

// The row step on one chunk: loss[r] = logsumexp(logits[r]) − logits[r][target] in fp32
// (0 for ignored rows) and, when write_grad, logits overwritten in place with
// softmax − onehot rounded to its dtype (zero rows for ignored targets).
// logits [n, V] contiguous, targets [n] int64 contiguous, loss [n] fp32 contiguous.
void row_step(Tensor& logits, const Tensor& targets, Tensor& loss, std::int64_t ignore_index, bool write_grad,
              bool two_pass) {
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (logits.is_cuda()) {
    const c10::cuda::CUDAGuard guard(logits.device());
    const auto dt = logits.scalar_type();
    const int code = dt == torch::kFloat32    ? launch::kLinearCeF32
                     : dt == torch::kBFloat16 ? launch::kLinearCeBf16
                                              : launch::kLinearCeF16;
    const char* err = launch::linear_ce_rows(
        logits.data_ptr(), targets.data_ptr<std::int64_t>(), loss.data_ptr<float>(), logits.size(0), logits.size(1),
        ignore_index, code, write_grad, at::cuda::getCurrentCUDAStream(logits.device().index()).stream(),
        two_pass ? launch::kLinearCeTwoPass : launch::kLinearCeAuto);
    TORCH_CHECK(err == nullptr, "linear_cross_entropy: CUDA row kernel: ", err);
    return;
  }
#endif
  static_cast<void>(two_pass);                  // one ATen path
  const Tensor x = logits.to(torch::kFloat32);  // no copy for fp32
  const Tensor counted = targets.ne(ignore_index);
  const Tensor safe = at::where(counted, targets, at::zeros({}, targets.options())).unsqueeze(1);
  const Tensor lse = at::logsumexp(x, {1});
  const Tensor x_target = x.gather(1, safe).squeeze(1);
  loss.copy_(at::where(counted, lse - x_target, at::zeros({}, loss.options())));
  if (!write_grad) return;
  Tensor grad = at::softmax(x, 1);
  grad.scatter_add_(1, safe, counted.to(torch::kFloat32).neg().unsqueeze(1));
  grad.masked_fill_(counted.logical_not().unsqueeze(1), 0.0);
  logits.copy_(grad);
}

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
// dweight (fp32 [V, H], row-major) += gᵀ · h with 16-bit g [n, V] and h [n, H] (row-major):
// one cublasGemmEx with fp32 output and beta = 1, on ATen's handle and stream, so the
// tensor cores accumulate straight into the fp32 buffer with no temporary. ATen 2.11 exports
// no GEMM with a 16-bit input and an fp32 accumulator to add into; the cuBLAS that
// libtorch_cuda loaded is in the process, so its GemmEx is looked up there (no link to a
// second cuBLAS). Returns false when it cannot run (then the ATen path is taken).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

GemmEx find_gemm_ex() {
  static const GemmEx f = reinterpret_cast<GemmEx>(dlsym(RTLD_DEFAULT, "cublasGemmEx"));
  return f;
}

bool gemm_into_fp32(Tensor& dweight, const Tensor& g, const Tensor& h) {
  const GemmEx gemm = find_gemm_ex();
  const std::int64_t n = g.size(0), vocab = g.size(1), hid = h.size(1);
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  if (!gemm || n > kMax || vocab > kMax || hid > kMax || !g.is_contiguous() || h.stride(1) != 1 ||
      !dweight.is_contiguous() || h.stride(0) > kMax)
    return false;
  const cudaDataType in = g.scalar_type() == torch::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.0f;
  // Column-major view: dweight is (H x V) with ld H; h is (H x n) with ld = its row stride;
  // g is (V x n) with ld V, used transposed. C(H x V) += A(H x n) · Bᵀ(n x V).
  const c10::cuda::CUDAGuard guard(g.device());
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const cublasStatus_t st =
      gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(hid), static_cast<int>(vocab), static_cast<int>(n), &one,
           h.data_ptr(), in, static_cast<int>(h.stride(0)), g.data_ptr(), in, static_cast<int>(vocab), &one,
           dweight.data_ptr(), CUDA_R_32F, static_cast<int>(hid), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS,
              "linear_cross_entropy: cublasGemmEx for the lm_head gradient failed (status ", static_cast<int>(st), ")");
  return true;
}
#endif

// dweight (fp32 [V, H]) += gᵀ · h (g [n, V], h [n, H], both in the inputs' dtype).
void accumulate_dweight(Tensor& dweight, const Tensor& g, const Tensor& h, std::int64_t slice_elements) {
  if (g.scalar_type() == torch::kFloat32) {
    dweight.addmm_(g.t(), h);
    return;
  }
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (g.is_cuda() && gemm_into_fp32(dweight, g, h)) return;
#endif
  if (g.is_cuda()) {
    // Fallback when cuBLAS's GemmEx cannot be found. 16-bit operands, fp32 product: aten::mm.dtype (the tensor cores,
    // fp32 output; CUDA only). torch 2.11's addmm.dtype wants its addend in the operands' dtype, so it cannot
    // accumulate into fp32 in place: the product goes through an fp32 temporary, one
    // vocabulary slice of at most `slice_elements` at a time, and is added to dweight.
    // Cost (H200, T 8192, H 3584, V 152064, bf16, default chunk 441 rows): forward +
    // backward 116 ms with a training weight against the reference's 52.5 ms (28.6 ms vs
    // 38.9 ms with a frozen weight): each chunk reads and writes the fp32 dweight and the
    // temporary. A GEMM with beta = 1 into fp32 (cublasGemmEx; ATen 2.11 exposes none) or
    // fewer, larger chunks when the weight trains would remove most of that.
    const std::int64_t vocab = dweight.size(0);
    const std::int64_t rows =
        std::clamp<std::int64_t>(slice_elements / std::max<std::int64_t>(1, dweight.size(1)), 1, vocab);
    for (std::int64_t v0 = 0; v0 < vocab; v0 += rows) {
      const std::int64_t r = std::min(rows, vocab - v0);
      dweight.narrow(0, v0, r).add_(at::mm(g.narrow(1, v0, r).t(), h, torch::kFloat32));
    }
    return;
  }
  // Elsewhere torch 2.11 has no kernel for aten::mm.dtype ("Could not run 'aten::mm.dtype'
  // with arguments from the 'CPU' backend"): upcast the chunk's operands (exact) instead.
  dweight.addmm_(g.t().to(torch::kFloat32), h.to(torch::kFloat32));
}

struct Result {
  Tensor loss;     // fp32 scalar
  Tensor dhidden;  // [T, H] in hidden's dtype, when need_hidden
  Tensor dweight;  // [V, H] fp32, when need_weight
};

Result run(const Tensor& hidden, const Tensor& weight, const Tensor& targets_in, const LinearCeOptions& options,
           bool need_hidden, bool need_weight) {
  const Tensor targets = targets_in.contiguous();
  const std::int64_t t = hidden.size(0);
  const std::int64_t vocab = weight.size(0);
  const Plan plan = make_plan(targets, vocab, options);
  const bool write_grad = need_hidden || need_weight;
  const std::int64_t slice_elements = std::max(plan.chunk * vocab, kSliceElements);

  Result result;
  Tensor loss_rows = at::zeros({t}, hidden.options().dtype(torch::kFloat32));
  if (need_hidden) result.dhidden = at::empty({t, hidden.size(1)}, hidden.options());
  if (need_weight) result.dweight = at::zeros({vocab, weight.size(1)}, weight.options().dtype(torch::kFloat32));
  for (std::size_t c = 0; c < plan.counted.size(); ++c) {
    const std::int64_t i = static_cast<std::int64_t>(c) * plan.chunk;
    const std::int64_t n = std::min(plan.chunk, t - i);
    if (plan.counted[c] == 0) {  // every target ignored: no loss, zero gradient, no logits
      if (need_hidden) result.dhidden.narrow(0, i, n).zero_();
      continue;
    }
    const Tensor h = hidden.narrow(0, i, n);
    Tensor logits = at::linear(h, weight).contiguous();
    Tensor loss = loss_rows.narrow(0, i, n);
    row_step(logits, targets.narrow(0, i, n), loss, options.ignore_index, write_grad, options.two_pass_rows);
    // `logits` now holds the chunk's gradient g = softmax − onehot.
    if (need_hidden) {
      Tensor dh = result.dhidden.narrow(0, i, n);
      at::mm_out(dh, logits, weight);
    }
    if (need_weight) accumulate_dweight(result.dweight, logits, h, slice_elements);
  }
  result.loss = loss_rows.sum();
  return result;
}

// src · g as `dtype`, the product formed in fp32 and rounded once; g is a 0-d tensor that
// stays on the device. An fp32 source (dweight) takes one multiply that casts as it stores;
// a 16-bit one (dhidden) goes through fp32 slices of at most kSliceElements.
Tensor scaled(const Tensor& src, const Tensor& g, torch::ScalarType dtype) {
  const Tensor gf = g.to(src.device(), torch::kFloat32);
  Tensor out = at::empty(src.sizes(), src.options().dtype(dtype));
  if (src.scalar_type() == torch::kFloat32) {  // one kernel: the product in fp32, cast as it is stored
    at::mul_out(out, src, gf);
    return out;
  }
  const std::int64_t rows = src.size(0);
  const std::int64_t step = std::clamp<std::int64_t>(kSliceElements / std::max<std::int64_t>(1, src.size(1)), 1,
                                                     std::max<std::int64_t>(1, rows));
  for (std::int64_t r0 = 0; r0 < rows; r0 += step) {
    const std::int64_t n = std::min(step, rows - r0);
    const Tensor s = src.narrow(0, r0, n);
    out.narrow(0, r0, n).copy_(s.scalar_type() == torch::kFloat32 ? s * gf : s.to(torch::kFloat32).mul_(gf));
  }
  return out;
}

class LinearCeFunction : public torch::autograd::Function<LinearCeFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& hidden, const Tensor& weight,
                        const Tensor& targets, std::int64_t chunk_tokens, std::int64_t ignore_index, bool need_hidden,
                        bool need_weight) {
    LinearCeOptions options;
    options.chunk_tokens = chunk_tokens;
    options.ignore_index = ignore_index;
    Result r = run(hidden, weight, targets, options, need_hidden, need_weight);
    ctx->save_for_backward({r.dhidden, r.dweight});
    ctx->saved_data["weight_dtype"] = weight.scalar_type();
    return r.loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& g = grad_outputs[0];
    Tensor dhidden, dweight;
    if (saved[0].defined()) dhidden = scaled(saved[0], g, saved[0].scalar_type());
    if (saved[1].defined()) dweight = scaled(saved[1], g, ctx->saved_data["weight_dtype"].toScalarType());
    return {dhidden, dweight, Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& targets, const LinearCeOptions& options) {
  check_inputs(hidden, weight, targets, options);
  const bool grad_mode = torch::GradMode::is_enabled();
  const bool need_hidden = grad_mode && hidden.requires_grad();
  const bool need_weight = grad_mode && weight.requires_grad();
  if (!need_hidden && !need_weight) return run(hidden, weight, targets, options, false, false).loss;
  return LinearCeFunction::apply(hidden, weight, targets, options.chunk_tokens, options.ignore_index, need_hidden,
                                 need_weight);
}

}  // namespace odyssey::kernels
