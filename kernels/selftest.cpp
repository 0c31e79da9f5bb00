#include "kernels/selftest.h"

#include <cmath>
#include <functional>
#include <memory>
#include <utility>

#include "kernels/grouped_gemm.h"
#include "kernels/linear_ce.h"
#include "kernels/moe_rows.h"
#include "kernels/quant4.h"
#include "kernels/quant4_ref.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/attention_tile.h"
#include "kernels/band_attention.h"
#include "kernels/cudnn_attention.h"
#include "kernels/decode_attention.h"

namespace odyssey::kernels {
namespace {

using Tensors = std::vector<torch::Tensor>;
// A kernel under test: inputs (some requiring grad) -> outputs.
using Fn = std::function<Tensors(const Tensors&)>;

struct Case {
  std::string kernel;
  std::vector<std::string> output_names;  // then "d" + input name for each differentiable input
  std::vector<std::string> input_names;
  Tensors inputs;  // in the working dtype (the exact run upcasts them)
  std::vector<bool> differentiable;
  Tensors cotangents;  // one per output, in the working dtype
  Fn fused, reference, exact;
  bool sixteen_bit_only = false;  // the fused op takes 16-bit inputs only (fp32 would run the reference)
};

// Outputs, then the gradients of Σ <output, cotangent> for the differentiable inputs. The
// inputs and cotangents are first rounded to `working` (so the exact float64 run sees the
// values the fused op sees), then cast to `dtype`.
Tensors evaluate(const Case& c, const Fn& f, torch::ScalarType working, torch::ScalarType dtype) {
  auto cast = [&](const torch::Tensor& t) { return t.is_floating_point() ? t.to(working).to(dtype) : t; };
  Tensors in;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    torch::Tensor t = cast(c.inputs[i]);
    in.push_back(c.differentiable[i] ? t.detach().clone().requires_grad_(true) : t);
  }
  const Tensors out = f(in);
  torch::Tensor objective = torch::zeros({}, out[0].options().dtype(torch::kFloat64));
  for (std::size_t i = 0; i < out.size(); ++i)
    objective = objective + (out[i].to(torch::kFloat64) * cast(c.cotangents[i]).to(torch::kFloat64)).sum();
  Tensors wrt;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (c.differentiable[i]) wrt.push_back(in[i]);
  const Tensors grads = wrt.empty() ? Tensors{} : torch::autograd::grad({objective}, wrt);
  Tensors all;
  for (const auto& o : out) all.push_back(o.detach().to(torch::kFloat64));
  for (const auto& g : grads) all.push_back(g.to(torch::kFloat64));
  return all;
}

double unit_roundoff(torch::ScalarType t) {
  return t == torch::kBFloat16 ? std::ldexp(1.0, -8) : t == torch::kHalf ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
}

void check(const Case& c, torch::ScalarType dtype, const std::string& path, std::vector<SelftestRow>* rows) {
  const Tensors fused = evaluate(c, c.fused, dtype, dtype);
  const Tensors ref = evaluate(c, c.reference, dtype, dtype);
  const Tensors exact = evaluate(c, c.exact, dtype, torch::kFloat64);
  std::vector<std::string> names = c.output_names;
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    if (c.differentiable[i]) names.push_back("d" + c.input_names[i]);
  for (std::size_t i = 0; i < names.size(); ++i) {
    SelftestRow r;
    r.kernel = c.kernel;
    r.dtype = dtype == torch::kBFloat16 ? "bf16" : "fp32";
    r.tensor = names[i];
    r.path = path;
    const double scale = std::max(exact[i].abs().max().item<double>(), 1e-30);
    r.max_abs = (fused[i] - exact[i]).abs().max().item<double>();
    r.rel = r.max_abs / scale;
    r.ref_rel = (ref[i] - exact[i]).abs().max().item<double>() / scale;
    r.bound = 2.0 * r.ref_rel + unit_roundoff(dtype);
    r.ok = std::isfinite(r.rel) && r.rel <= r.bound;
    rows->push_back(std::move(r));
  }
}

// ---- the exact runs: float64, no intermediate rounding -----------------------------------
// Each case's exact run is its reference on the float64-cast inputs (every reference keeps
// float64 throughout: add_rms_norm_reference's statistic, linear_cross_entropy_reference's
// logits), so each formula is written once, in kernels/*_ref.cpp. The 4-bit product alone
// builds its own: the weight dequantized in fp32, then the product in float64.

Case rms_case(const torch::Device& dev, std::int64_t rows, std::int64_t hidden) {
  const double eps = 1e-6;
  Case c;
  c.kernel = "add_rms_norm " + std::to_string(rows) + "x" + std::to_string(hidden);
  c.output_names = {"y", "sum"};
  c.input_names = {"x", "residual", "weight"};
  const auto o = torch::TensorOptions().device(dev);
  c.inputs = {torch::randn({rows, hidden}, o), torch::randn({rows, hidden}, o), 1.0 + 0.1 * torch::randn({hidden}, o)};
  c.differentiable = {true, true, true};
  c.cotangents = {torch::randn({rows, hidden}, o), torch::randn({rows, hidden}, o)};
  c.fused = [eps](const Tensors& in) {
    auto [y, s] = add_rms_norm(in[0], in[1], in[2], eps);
    return Tensors{y, s};
  };
  c.reference = [eps](const Tensors& in) {
    auto [y, s] = add_rms_norm_reference(in[0], in[1], in[2], eps);
    return Tensors{y, s};
  };
  c.exact = c.reference;  // in float64: the statistic too (add_rms_norm_reference)
  return c;
}

Case swiglu_case(const torch::Device& dev, std::int64_t rows, std::int64_t inter) {
  Case c;
  c.kernel = "swiglu " + std::to_string(rows) + "x" + std::to_string(inter);
  c.output_names = {"y"};
  c.input_names = {"gate", "up"};
  const auto o = torch::TensorOptions().device(dev);
  c.inputs = {2.0 * torch::randn({rows, inter}, o), torch::randn({rows, inter}, o)};
  c.differentiable = {true, true};
  c.cotangents = {torch::randn({rows, inter}, o)};
  c.fused = [](const Tensors& in) { return Tensors{swiglu(in[0], in[1])}; };
  c.reference = [](const Tensors& in) { return Tensors{swiglu_reference(in[0], in[1])}; };
  c.exact = c.reference;  // in float64
  return c;
}

// The attention-tile softmax (attention_tile.h), forward then backward from the forward's
// log-sum-exp: `groups` heads of `rows` query rows from row0 against m keys from key0, in two
// samples (the second starting inside the tile) and an optional window; raw scores of a few
// units times 1/scale so the cap bends them. Outputs p, lse, the backward's p and ds.
Case attention_tile_case(const torch::Device& dev, std::int64_t groups, std::int64_t rows, std::int64_t m,
                         std::int64_t window, double softcap) {
  Case c;
  c.kernel = "attention_tile " + std::to_string(groups) + "x" + std::to_string(rows) + "x" + std::to_string(m) +
             (window > 0 ? " window " + std::to_string(window) : "") +
             (softcap > 0 ? " cap " + std::to_string(static_cast<int>(softcap)) : "");
  c.output_names = {"p", "lse", "p_backward", "ds"};
  c.input_names = {"scores", "dp", "delta"};
  const auto o = torch::TensorOptions().device(dev);
  const std::int64_t key0 = 5, row0 = key0 + m - rows, total = row0 + rows, split = row0 + rows / 3;
  std::vector<std::int64_t> first(static_cast<std::size_t>(total));
  for (std::int64_t i = 0; i < total; ++i) {
    const std::int64_t start = i < split ? 0 : split;
    first[static_cast<std::size_t>(i)] = window > 0 ? std::max(start, i - window + 1) : start;
  }
  const double scale = 1.0 / 16;
  AttentionTile tile{torch::tensor(first, torch::kInt64).to(dev), row0, rows, key0, scale, softcap};
  c.inputs = {16.0 * 3.0 * torch::randn({groups * rows, m}, o), torch::randn({groups * rows, m}, o),
              0.1 * torch::randn({groups * rows}, o)};
  c.differentiable = {false, false, false};
  c.cotangents = {torch::randn({groups * rows, m}, o), torch::randn({groups * rows}, o),
                  torch::randn({groups * rows, m}, o), torch::randn({groups * rows, m}, o)};
  auto run = [tile](bool fused) {
    return [tile, fused](const Tensors& in) {
      const torch::ScalarType dt = in[0].scalar_type();
      const torch::ScalarType acc = dt == torch::kDouble ? torch::kDouble : torch::kFloat32;
      const torch::Tensor s = in[0].to(acc), dp = in[1].to(acc), delta = in[2].to(acc);
      const auto [p, lse] = fused ? tile_softmax(s, tile, dt) : tile_softmax_reference(s, tile, dt);
      const auto [pb, ds] = fused ? tile_softmax_backward(s, dp, lse, delta, tile, dt)
                                  : tile_softmax_backward_reference(s, dp, lse, delta, tile, dt);
      return Tensors{p, lse, pb, ds};
    };
  };
  c.fused = run(true);
  c.reference = run(false);
  c.exact = c.reference;  // in float64
  return c;
}

// Band attention (band_attention.h): a row of t tokens in two samples (the second starting at
// t / 3), hq query heads over hkv KV heads of width d, an optional window and soft-cap (its tanh
// exact or by tanh.approx); q and k of a few units so the cap bends the scores. Outputs out and
// lse; gradients of q, k and v.
Case band_attention_case(const torch::Device& dev, std::int64_t t, std::int64_t hq, std::int64_t hkv, std::int64_t d,
                         std::int64_t window, double softcap, bool fast_tanh = false) {
  Case c;
  c.kernel = "band_attention " + std::to_string(t) + "x" + std::to_string(hq) + "/" + std::to_string(hkv) + "x" +
             std::to_string(d) + (window > 0 ? " window " + std::to_string(window) : "") +
             (softcap > 0 ? " cap " + std::to_string(static_cast<int>(softcap)) : "") +
             (fast_tanh ? " tanh.approx" : "");
  c.output_names = {"out", "lse"};
  c.input_names = {"q", "k", "v"};
  c.sixteen_bit_only = true;
  const auto o = torch::TensorOptions().device(dev);
  const std::int64_t split = t / 3;
  std::vector<std::int64_t> first(static_cast<std::size_t>(t));
  for (std::int64_t i = 0; i < t; ++i) {
    const std::int64_t start = i < split ? 0 : split;
    first[static_cast<std::size_t>(i)] = window > 0 ? std::max(start, i - window + 1) : start;
  }
  const torch::Tensor first_key = torch::tensor(first, torch::kInt64).to(dev);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double spread = 3.0 / std::pow(static_cast<double>(d), 0.25);  // q . k * scale of a few units
  c.inputs = {spread * torch::randn({t, hq, d}, o), spread * torch::randn({t, hkv, d}, o),
              torch::randn({t, hkv, d}, o)};
  c.differentiable = {true, true, true};
  c.cotangents = {torch::randn({t, hq, d}, o), torch::randn({hq, t}, o)};
  c.fused = [first_key, scale, softcap, fast_tanh](const Tensors& in) {
    auto [out, lse] = band_attention(in[0], in[1], in[2], first_key, scale, softcap, fast_tanh);
    return Tensors{out, lse};
  };
  c.reference = [first_key, scale, softcap](const Tensors& in) {
    auto [out, lse] = band_attention_reference(in[0], in[1], in[2], first_key, scale, softcap);
    return Tensors{out, lse.detach()};  // as the fused op: lse is not differentiated
  };
  c.exact = c.reference;  // in float64
  return c;
}

// Soft-capped causal attention through cuDNN (cudnn_attention.h): one causal row of t tokens
// (cuDNN's rectangles on 2^L levels, the band kernels on the diagonal's blocks), or with a
// window shorter than the row (cuDNN's rectangles at each block distance and the masked edge),
// checked against the same dense formula as the band kernels.
Case softcap_causal_case(const torch::Device& dev, std::int64_t t, std::int64_t hq, std::int64_t hkv, std::int64_t d,
                         double softcap, std::int64_t window = 0) {
  Case c = band_attention_case(dev, t, hq, hkv, d, 0, softcap);
  const std::int64_t block = window > 0 ? softcap_window_block(t, window) : softcap_diagonal_block(t);
  c.kernel = std::string(window > 0 ? "softcap_window (cuDNN) " : "softcap_causal (cuDNN) ") + std::to_string(t) + "x" +
             std::to_string(hq) + "/" + std::to_string(hkv) + "x" + std::to_string(d) + " cap " +
             std::to_string(static_cast<int>(softcap)) +
             (window > 0 ? " window " + std::to_string(window) : std::string()) + ", blocks of " +
             std::to_string(block);
  c.output_names = {"out"};
  c.cotangents.resize(1);
  std::vector<std::int64_t> first(static_cast<std::size_t>(t), 0);
  for (std::int64_t i = 0; i < t && window > 0; ++i)
    first[static_cast<std::size_t>(i)] = std::max<std::int64_t>(0, i - window + 1);
  const torch::Tensor first_key = torch::tensor(first, torch::kInt64).to(dev);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  c.fused = [scale, softcap, window](const Tensors& in) {
    return Tensors{softcap_causal_attention(in[0], in[1], in[2], scale, softcap, window)};
  };
  c.reference = [first_key, scale, softcap](const Tensors& in) {
    return Tensors{band_attention_reference(in[0], in[1], in[2], first_key, scale, softcap).first};
  };
  c.exact = c.reference;
  return c;
}

// Decode attention (decode_attention.h): `batch` rows of one query per head against a cache of
// `length` slots, the first rows left-padded (their first slots not kept) and a random tenth of
// the other slots dropped; q and k of a few units so the softmax is not flat.
Case decode_attention_case(const torch::Device& dev, std::int64_t batch, std::int64_t q_heads, std::int64_t kv_heads,
                           std::int64_t length, std::int64_t head_dim) {
  Case c;
  c.kernel = "decode_attention " + std::to_string(batch) + "x" + std::to_string(q_heads) + "/" +
             std::to_string(kv_heads) + "x" + std::to_string(length) + "x" + std::to_string(head_dim);
  c.output_names = {"out"};
  c.input_names = {"q", "k", "v", "keep"};
  const auto o = torch::TensorOptions().device(dev);
  torch::Tensor keep = torch::rand({batch, length}, o).gt(0.1);
  for (std::int64_t b = 0; b < batch; b += 2) keep[b].narrow(0, 0, std::min(length - 1, 7 * (b + 1))).fill_(false);
  keep.select(1, length - 1).fill_(true);  // every row keeps its newest slot
  c.inputs = {torch::randn({batch, q_heads, head_dim}, o), 0.3 * torch::randn({batch, kv_heads, length, head_dim}, o),
              torch::randn({batch, kv_heads, length, head_dim}, o), keep};
  c.differentiable = {false, false, false, false};
  c.cotangents = {torch::randn({batch, q_heads, head_dim}, o)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  c.fused = [scale](const Tensors& in) { return Tensors{decode_attention(in[0], in[1], in[2], in[3], scale)}; };
  c.reference = [scale](const Tensors& in) {
    return Tensors{decode_attention_reference(in[0], in[1], in[2], in[3], scale)};
  };
  c.exact = c.reference;  // in float64
  return c;
}

// Grouped GEMM (grouped_gemm.h): rows split over `experts` groups of random sizes (some
// empty), against the per-expert loop; the ends are not differentiable.
Case grouped_case(const torch::Device& dev, std::int64_t rows, std::int64_t experts, std::int64_t width_in,
                  std::int64_t out) {
  Case c;
  c.kernel = "grouped_linear " + std::to_string(experts) + "x" + std::to_string(out) + "x" + std::to_string(width_in) +
             " on " + std::to_string(rows) + " rows";
  c.output_names = {"y"};
  c.input_names = {"x", "w", "ends"};
  const auto o = torch::TensorOptions().device(dev);
  // Skewed group sizes, a quarter of the experts empty (routers are rarely balanced).
  torch::Tensor weights = torch::rand({experts}).pow(3) * (torch::rand({experts}) > 0.25).to(torch::kFloat32);
  weights[0] = 1.0;
  torch::Tensor counts = (weights / weights.sum() * static_cast<double>(rows)).floor().to(torch::kInt64);
  counts[0] += rows - counts.sum().item<std::int64_t>();
  c.inputs = {torch::randn({rows, width_in}, o),
              torch::randn({experts, out, width_in}, o) * std::pow(static_cast<double>(width_in), -0.5),
              counts.cumsum(0).to(torch::kInt32).to(dev)};
  c.differentiable = {true, true, false};
  c.cotangents = {torch::randn({rows, out}, o)};
  c.fused = [](const Tensors& in) { return Tensors{grouped_linear(in[0], in[1], in[2])}; };
  c.reference = [](const Tensors& in) { return Tensors{grouped_linear_reference(in[0], in[1], in[2])}; };
  c.exact = c.reference;  // in float64
  return c;
}

// The MoE rows' way back (moe_rows.h): `tokens` tokens' k rows in a random sorted order,
// weighted by router-like weights and summed; differentiable in the rows and the weights.
Case combine_case(const torch::Device& dev, std::int64_t tokens, std::int64_t k, std::int64_t h) {
  Case c;
  c.kernel = "combine_rows " + std::to_string(tokens) + "x" + std::to_string(k) + "x" + std::to_string(h);
  c.output_names = {"y"};
  c.input_names = {"rows", "index", "order", "weights"};
  const auto o = torch::TensorOptions().device(dev);
  const std::int64_t m = tokens * k;
  const torch::Tensor index = torch::randperm(m, o.dtype(torch::kInt64));
  const torch::Tensor order = torch::empty_like(index).scatter_(0, index, torch::arange(m, index.options()));
  c.inputs = {torch::randn({m, h}, o), index, order, torch::softmax(torch::randn({tokens, k}, o), -1)};
  c.differentiable = {true, false, false, true};
  c.cotangents = {torch::randn({tokens, h}, o)};
  c.fused = [](const Tensors& in) { return Tensors{combine_rows(in[0], in[1], in[2], in[3])}; };
  c.reference = [](const Tensors& in) { return Tensors{combine_rows_reference(in[0], in[1], in[3])}; };
  c.exact = c.reference;  // in float64
  return c;
}

// swiglu_packed on one [rows, 2I] tensor against the reference on its halves.
Case swiglu_packed_case(const torch::Device& dev, std::int64_t rows, std::int64_t inter) {
  Case c;
  c.kernel = "swiglu_packed " + std::to_string(rows) + "x" + std::to_string(2 * inter);
  c.output_names = {"y"};
  c.input_names = {"gate_up"};
  const auto o = torch::TensorOptions().device(dev);
  c.inputs = {2.0 * torch::randn({rows, 2 * inter}, o)};
  c.differentiable = {true};
  c.cotangents = {torch::randn({rows, inter}, o)};
  c.fused = [](const Tensors& in) { return Tensors{swiglu_packed(in[0])}; };
  c.reference = [inter](const Tensors& in) {
    return Tensors{swiglu_reference(in[0].narrow(-1, 0, inter), in[0].narrow(-1, inter, inter))};
  };
  c.exact = c.reference;  // in float64
  return c;
}

// The fused projections' cases: inputs x-like [rows, in] tensors first, then the weight
// [out, in], bias [out] and a rank-r LoRA pair (all trained), scaled by kScaling.
constexpr double kScaling = 2.0;

Tensors projection_inputs(const torch::TensorOptions& o, std::int64_t in, std::int64_t out, std::int64_t r) {
  const double fan = 1.0 / std::sqrt(static_cast<double>(in));
  return {fan * torch::randn({out, in}, o), torch::randn({out}, o), fan * torch::randn({r, in}, o),
          torch::randn({out, r}, o)};
}

LinearWeights projection_weights(const Tensors& in, std::size_t first) {
  LinearWeights w;
  w.weight = in[first];
  w.bias = in[first + 1];
  w.lora_a = in[first + 2];
  w.lora_b = in[first + 3];
  w.lora_scaling = kScaling;
  return w;
}

// The projection as plain layers (the reference and the exact runs).
torch::Tensor projection_layers(const torch::Tensor& x, const Tensors& in, std::size_t first) {
  return at::linear(x, in[first], in[first + 1]) + at::linear(at::linear(x, in[first + 2]), in[first + 3]) * kScaling;
}

Case projection_case(const std::string& name, Tensors inputs, std::vector<std::string> input_names,
                     const torch::TensorOptions& o, std::int64_t rows, std::int64_t in, std::int64_t out,
                     std::int64_t r) {
  Case c;
  c.kernel = name + " " + std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out);
  c.output_names = {"y"};
  c.input_names = std::move(input_names);
  for (const auto* n : {"weight", "bias", "lora_a", "lora_b"}) c.input_names.emplace_back(n);
  c.inputs = std::move(inputs);
  for (auto& t : projection_inputs(o, in, out, r)) c.inputs.push_back(t);
  c.differentiable.assign(c.inputs.size(), true);
  c.cotangents = {torch::randn({rows, out}, o)};
  return c;
}

// The MLP's SwiGLU + down projection with the activation recomputed in backward, against
// swiglu_reference followed by the linear layers.
Case swiglu_down_case(const torch::Device& dev, std::int64_t rows, std::int64_t inter, std::int64_t out,
                      std::int64_t r) {
  const auto o = torch::TensorOptions().device(dev);
  Case c = projection_case("swiglu_down", {2.0 * torch::randn({rows, inter}, o), torch::randn({rows, inter}, o)},
                           {"gate", "up"}, o, rows, inter, out, r);
  c.fused = [](const Tensors& in) { return Tensors{swiglu_down(in[0], in[1], projection_weights(in, 2))}; };
  c.reference = [](const Tensors& in) { return Tensors{projection_layers(swiglu_reference(in[0], in[1]), in, 2)}; };
  c.exact = c.reference;  // in float64
  return c;
}

// A projection of an RMSNorm's output that is recomputed in backward, after the fused norm,
// against the reference norm and linear layers.
Case rms_norm_linear_case(const torch::Device& dev, std::int64_t rows, std::int64_t hidden, std::int64_t out,
                          std::int64_t r) {
  const double eps = 1e-6;
  const auto o = torch::TensorOptions().device(dev);
  Case c = projection_case("rms_norm_linear", {torch::randn({rows, hidden}, o), 1.0 + 0.1 * torch::randn({hidden}, o)},
                           {"x", "norm_weight"}, o, rows, hidden, out, r);
  c.fused = [eps](const Tensors& in) {
    return Tensors{rms_norm_linear(rms_norm(in[0], in[1], eps), in[0], in[1], eps, projection_weights(in, 2))};
  };
  c.reference = [eps](const Tensors& in) {
    return Tensors{projection_layers(add_rms_norm_reference(in[0], {}, in[1], eps).first, in, 2)};
  };
  c.exact = c.reference;  // in float64
  return c;
}

// The whole MLP of a norm's output, keeping none of its intermediates (all recomputed in
// backward), after the fused norm, against the reference norm, linear layers and SwiGLU.
// skip_output (a checkpointed layer's recomputation): the op leaves its value uncomputed, so
// the case's output adds the computed op's value, detached, to the skipping op's zeros: the
// value checked is the MLP's, every gradient the skipping op's backward.
// dropout > 0: each adapter's LoRA dropout (a LoraDropout draw per projection, fixed seeds),
// which the fused op redraws in backward; the reference and exact runs drop their adapters'
// inputs by the same mask bits (lora_dropout_mask: the same bits in every dtype).
Case rms_norm_mlp_case(const torch::Device& dev, std::int64_t rows, std::int64_t hidden, std::int64_t inter,
                       std::int64_t r, bool skip_output = false, double dropout = 0.0) {
  const double eps = 1e-6;
  const auto o = torch::TensorOptions().device(dev);
  Case c;
  c.kernel = "rms_norm_mlp " + std::to_string(rows) + "x" + std::to_string(hidden) + "->" + std::to_string(inter) +
             (skip_output ? " skip_output" : "") + (dropout > 0.0 ? " lora_dropout" : "");
  c.output_names = {"y"};
  c.input_names = {"x", "norm_weight"};
  c.inputs = {torch::randn({rows, hidden}, o), 1.0 + 0.1 * torch::randn({hidden}, o)};
  const std::int64_t ins[3] = {hidden, hidden, inter}, outs[3] = {inter, inter, hidden};
  const char* const proj[3] = {"gate.", "up.", "down."};
  for (int k = 0; k < 3; ++k) {
    for (const auto* n : {"weight", "bias", "lora_a", "lora_b"}) c.input_names.push_back(std::string(proj[k]) + n);
    for (auto& t : projection_inputs(o, ins[k], outs[k], r)) c.inputs.push_back(t);
  }
  c.differentiable.assign(c.inputs.size(), true);
  c.cotangents = {torch::randn({rows, hidden}, o)};
  std::vector<c10::intrusive_ptr<LoraDropout>> drops(3);
  if (dropout > 0.0) {
    for (std::size_t k = 0; k < 3; ++k) {
      drops[k] = c10::make_intrusive<LoraDropout>();
      drops[k]->p = dropout;
      drops[k]->seed = 20261207 + k;
    }
  }
  auto weights = [drops](const Tensors& in, std::size_t k) {
    LinearWeights w = projection_weights(in, 2 + 4 * k);
    w.dropout = drops[k];
    return w;
  };
  c.fused = [eps, skip_output, weights](const Tensors& in) {
    auto mlp = [&](bool skip) {
      return rms_norm_mlp(rms_norm(in[0], in[1], eps), in[0], in[1], eps, weights(in, 0), weights(in, 1),
                          weights(in, 2), skip);
    };
    if (!skip_output) return Tensors{mlp(false)};
    return Tensors{mlp(true) + mlp(false).detach()};
  };
  c.reference = [eps, drops](const Tensors& in) {
    auto layer = [&](const torch::Tensor& x, std::size_t k) {
      if (!drops[k]) return projection_layers(x, in, 2 + 4 * k);
      const torch::Tensor mask = lora_dropout_mask(*drops[k], x.size(0), x.size(1), x.options());
      const torch::Tensor xd = x * mask * (1.0 / (1.0 - drops[k]->p));
      return at::linear(x, in[2 + 4 * k], in[3 + 4 * k]) +
             at::linear(at::linear(xd, in[4 + 4 * k]), in[5 + 4 * k]) * kScaling;
    };
    const torch::Tensor n = add_rms_norm_reference(in[0], {}, in[1], eps).first;
    return Tensors{layer(swiglu_reference(layer(n, 0), layer(n, 1)), 2)};
  };
  c.exact = c.reference;  // in float64
  return c;
}

Case rope_case(const torch::Device& dev, std::int64_t tokens, std::int64_t hq, std::int64_t hk, std::int64_t d) {
  Case c;
  c.kernel = "apply_rope_ " + std::to_string(tokens) + "x(" + std::to_string(hq) + "+" + std::to_string(hk) + ")x" +
             std::to_string(d);
  c.output_names = {"q", "k"};
  c.input_names = {"q", "k", "cos", "sin"};
  const auto o = torch::TensorOptions().device(dev);
  // A packed row: positions restart at 0 for each of three samples.
  const std::int64_t a = tokens / 2, b = tokens / 3;
  const torch::Tensor pos =
      torch::cat({torch::arange(a, o), torch::arange(b, o), torch::arange(tokens - a - b, o)}).to(torch::kFloat64);
  const torch::Tensor inv = torch::pow(1e6, -torch::arange(0, d, 2, o.dtype(torch::kFloat64)) / static_cast<double>(d));
  const torch::Tensor ang = torch::outer(pos, inv);
  const torch::Tensor emb = torch::cat({ang, ang}, -1);
  c.inputs = {torch::randn({tokens, hq, d}, o), torch::randn({tokens, hk, d}, o), emb.cos().to(torch::kFloat32),
              emb.sin().to(torch::kFloat32)};
  c.differentiable = {true, true, false, false};
  c.cotangents = {torch::randn({tokens, hq, d}, o), torch::randn({tokens, hk, d}, o)};
  c.fused = [](const Tensors& in) {
    auto [q, k] = apply_rope_(in[0].clone(), in[1].clone(), in[2], in[3]);
    return Tensors{q, k};
  };
  c.reference = [](const Tensors& in) {
    auto [q, k] = apply_rope_reference(in[0], in[1], in[2], in[3]);
    return Tensors{q, k};
  };
  c.exact = c.reference;  // in float64
  return c;
}

// two_pass: the CUDA row step's two-pass kernel even where the one-read cluster kernel applies.
Case linear_ce_case(const torch::Device& dev, std::int64_t tokens, std::int64_t hidden, std::int64_t vocab,
                    std::int64_t chunk, bool two_pass = false) {
  Case c;
  c.kernel = "linear_cross_entropy " + std::to_string(tokens) + "x" + std::to_string(hidden) + " V" +
             std::to_string(vocab) + (two_pass ? " two-pass rows" : "");
  c.output_names = {"loss"};
  c.input_names = {"hidden", "weight", "targets"};
  const auto o = torch::TensorOptions().device(dev);
  torch::Tensor targets = torch::randint(0, vocab, {tokens}, o.dtype(torch::kInt64));
  targets.narrow(0, 0, tokens / 8).fill_(-100);  // unlabelled tokens (prompt, padding)
  c.inputs = {torch::randn({tokens, hidden}, o), 0.05 * torch::randn({vocab, hidden}, o), targets};
  c.differentiable = {true, true, false};
  c.cotangents = {torch::full({}, 0.37, o)};
  c.fused = [chunk, two_pass](const Tensors& in) {
    LinearCeOptions opt;
    opt.chunk_tokens = chunk;
    opt.two_pass_rows = two_pass;
    return Tensors{linear_cross_entropy(in[0], in[1], in[2], opt)};
  };
  c.reference = [](const Tensors& in) { return Tensors{linear_cross_entropy_reference(in[0], in[1], in[2])}; };
  c.exact = c.reference;  // in float64 (the logits stay float64)
  return c;
}

}  // namespace

// A 4-bit projection y = x W^T (QLoRA, quant4.h): the op (the CUDA dequantizer on a GPU)
// against the ATen dequantizer's product, forward and the input's gradient; exact: float64
// on the fp32-dequantized weight.
Case quant4_linear_case(const torch::Device& dev, std::int64_t rows, std::int64_t in, std::int64_t out, Quant4Type type,
                        bool nested) {
  const auto o = torch::TensorOptions().device(dev);
  const auto q = quantize_4bit(torch::randn({out, in}, o) / std::sqrt(static_cast<double>(in)), type, 64, nested);
  Case c;
  c.kernel = std::string("quant4_linear ") + quant4_type_name(type) + (nested ? "+dq " : " ") + std::to_string(rows) +
             "x" + std::to_string(in) + "->" + std::to_string(out);
  c.output_names = {"y"};
  c.input_names = {"x"};
  c.inputs = {torch::randn({rows, in}, o)};
  c.differentiable = {true};
  c.cotangents = {torch::randn({rows, out}, o)};
  c.fused = [q](const Tensors& x) { return Tensors{quant4_linear(x[0], q)}; };
  c.reference = [q](const Tensors& x) {
    return Tensors{at::linear(x[0], dequantize_4bit_reference(*q, x[0].scalar_type()))};
  };
  c.exact = [q](const Tensors& x) {
    return Tensors{at::linear(x[0], dequantize_4bit_reference(*q, torch::kFloat32).to(torch::kFloat64))};
  };
  return c;
}

// 4-bit experts (grouped_linear_quant4): the grouped GEMM on the CUDA-dequantized stack against
// the per-expert loop on the ATen dequantizer's stack, rows split as grouped_case splits them.
Case grouped_quant4_case(const torch::Device& dev, std::int64_t rows, std::int64_t experts, std::int64_t width_in,
                         std::int64_t out) {
  Case c = grouped_case(dev, rows, experts, width_in, out);
  const auto q = quantize_4bit(c.inputs[1], Quant4Type::NF4, 64, true);
  c.kernel = "grouped_linear_quant4 nf4+dq " + std::to_string(experts) + "x" + std::to_string(out) + "x" +
             std::to_string(width_in) + " on " + std::to_string(rows) + " rows";
  c.input_names = {"x", "ends"};
  c.inputs = {c.inputs[0], c.inputs[2]};
  c.differentiable = {true, false};
  c.fused = [q](const Tensors& in) { return Tensors{grouped_linear_quant4(in[0], q, in[1])}; };
  c.reference = [q](const Tensors& in) {
    return Tensors{grouped_linear_reference(in[0], dequantize_4bit_reference(*q, in[0].scalar_type()), in[1])};
  };
  c.exact = [q](const Tensors& in) {
    return Tensors{
        grouped_linear_reference(in[0], dequantize_4bit_reference(*q, torch::kFloat32).to(torch::kFloat64), in[1])};
  };
  return c;
}

// The dequantized weight itself: the op's (CUDA kernel's) against the ATen dequantizer's,
// which must be bit-identical in every dtype (bound 0).
void check_dequantize(const torch::Device& dev, std::int64_t out, std::int64_t in, Quant4Type type, bool nested,
                      const std::string& path, std::vector<SelftestRow>* rows) {
  const auto q = quantize_4bit(torch::randn({out, in}, torch::TensorOptions().device(dev)), type, 64, nested);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const torch::Tensor got = dequantize_4bit(*q, dtype).to(torch::kFloat64);
    const torch::Tensor want = dequantize_4bit_reference(*q, dtype).to(torch::kFloat64);
    SelftestRow r;
    r.kernel = std::string("dequantize_4bit ") + quant4_type_name(type) + (nested ? "+dq " : " ") +
               std::to_string(out) + "x" + std::to_string(in);
    r.dtype = dtype == torch::kBFloat16 ? "bf16" : "fp32";
    r.tensor = "w";
    r.path = path;
    r.max_abs = (got - want).abs().max().item<double>();
    r.rel = r.max_abs / std::max(want.abs().max().item<double>(), 1e-30);
    r.ref_rel = 0;
    r.bound = 0;
    r.ok = r.max_abs == 0.0;
    rows->push_back(std::move(r));
  }
}

// The LoRA dropout mask the CUDA kernel computes against the CPU loop's (lora_dropout_bits.h,
// the same Philox bits): bit-identical in every dtype (bound 0), on an aligned width (the
// 128-bit path) and an odd one (one element a thread).
void check_dropout_mask(const torch::Device& dev, std::int64_t n, std::int64_t in, double p, const std::string& path,
                        std::vector<SelftestRow>* rows) {
  LoraDropout d;
  d.p = p;
  d.seed = 0x5eed0000ull + static_cast<std::uint64_t>(in);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const torch::Tensor got = lora_dropout_mask(d, n, in, torch::TensorOptions().device(dev).dtype(dtype));
    const torch::Tensor want = lora_dropout_mask(d, n, in, torch::TensorOptions().dtype(dtype));
    SelftestRow r;
    r.kernel = "lora_dropout mask " + std::to_string(n) + "x" + std::to_string(in);
    r.dtype = dtype == torch::kBFloat16 ? "bf16" : "fp32";
    r.tensor = "mask";
    r.path = path;
    r.max_abs = (got.cpu().to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>();
    r.rel = r.max_abs;
    r.ref_rel = 0;
    r.bound = 0;
    r.ok = r.max_abs == 0.0;
    rows->push_back(std::move(r));
  }
}

std::vector<SelftestRow> run_selftest(const torch::Device& device) {
  torch::manual_seed(1234);
  const bool gpu = device.is_cuda();
  const std::string path = gpu ? "cuda" : "aten";
  // GPU: Qwen2.5-7B's widths (hidden 3584, intermediate 18944, 28 + 4 heads of 128,
  // vocabulary 152064) on a few thousand tokens; CPU: small shapes with odd sizes.
  std::vector<Case> cases;
  if (gpu) {
    cases.push_back(rms_case(device, 4096, 3584));
    cases.push_back(rms_case(device, 333, 128));   // Qwen3's per-head q/k norm width, odd row count
    cases.push_back(rms_case(device, 2049, 896));  // Qwen2.5-0.5B's width: a warp per row
    cases.push_back(swiglu_case(device, 2048, 18944));
    cases.push_back(swiglu_down_case(device, 1024, 18944, 3584, 16));
    cases.push_back(rms_norm_linear_case(device, 2048, 3584, 4608, 16));  // one projection of 7B's q, k and v widths
    cases.push_back(rms_norm_mlp_case(device, 1024, 3584, 18944, 16));
    cases.push_back(rms_norm_mlp_case(device, 1024, 3584, 18944, 16, /*skip_output=*/true));
    // LoRA dropout 0.05 (ms-swift's default); 4099 rows span two mask blocks of the down projection's input.
    cases.push_back(rms_norm_mlp_case(device, 4099, 3584, 18944, 16, /*skip_output=*/true, /*dropout=*/0.05));
    cases.push_back(rope_case(device, 4099, 28, 4, 128));
    // 16-bit rows of Qwen's vocabulary take the one-read cluster kernel (5 packs a thread),
    // fp32 ones the two-pass kernel (too long for the registers); both kernels on bf16 rows;
    // Llama 3's 128,256 takes the cluster kernel in fp32 too (8 packs); GPT-2's odd 50,257
    // leaves rows unaligned (two-pass).
    cases.push_back(linear_ce_case(device, 1024, 3584, 152064, 300));
    cases.push_back(linear_ce_case(device, 1024, 3584, 152064, 300, /*two_pass=*/true));
    cases.push_back(linear_ce_case(device, 515, 1024, 128256, 200));
    cases.push_back(linear_ce_case(device, 333, 768, 50257, 128));
    cases.push_back(quant4_linear_case(device, 2048, 4096, 14336, Quant4Type::NF4, true));  // Llama-3-8B's up_proj
    cases.push_back(quant4_linear_case(device, 333, 3584, 512, Quant4Type::FP4, false));
    // Qwen3-30B-A3B's experts (128, hidden 2048, 768 wide): gate_up and down on 4096 tokens x top 8.
    cases.push_back(grouped_case(device, 32768, 128, 2048, 1536));
    cases.push_back(grouped_case(device, 32768, 128, 768, 2048));
    cases.push_back(grouped_case(device, 1000, 7, 64, 40));                // odd row counts per expert
    cases.push_back(grouped_quant4_case(device, 32768, 128, 2048, 1536));  // the same experts in 4 bits
    cases.push_back(grouped_quant4_case(device, 32768, 128, 768, 2048));
    // Their rows' way back (4096 tokens, top 8, hidden 2048), an odd unaligned width, and the
    // experts' SwiGLU on the packed gate_up (768 wide).
    cases.push_back(combine_case(device, 4096, 8, 2048));
    cases.push_back(combine_case(device, 333, 3, 201));
    cases.push_back(swiglu_packed_case(device, 32768, 768));
    cases.push_back(swiglu_packed_case(device, 77, 101));
    // Gemma-2-9B's 16 query heads: a tile of 192 rows of a 32K row (global, cap 50) and of a
    // window of 4096 (cap 50), and a strongly bent cap.
    cases.push_back(attention_tile_case(device, 16, 192, 32768, 0, 50.0));
    cases.push_back(attention_tile_case(device, 16, 192, 4287, 4096, 50.0));
    cases.push_back(attention_tile_case(device, 4, 77, 1000, 300, 2.0));
    cases.push_back(attention_tile_case(device, 4, 77, 1000, 0, 0.0));
    // Band attention: Gemma-2-9B's heads (16 over 8, 256 wide; cap 50, global and a window),
    // Gemma-2-27B's width (128) with 7 query heads a KV head, 64 wide with a strongly bent cap
    // over one KV head, and no cap at all; odd lengths leave partial blocks.
    cases.push_back(band_attention_case(device, 1500, 16, 8, 256, 0, 50.0));
    cases.push_back(band_attention_case(device, 1111, 16, 8, 256, 300, 50.0));
    cases.push_back(band_attention_case(device, 999, 28, 4, 128, 0, 30.0));
    cases.push_back(band_attention_case(device, 333, 4, 1, 64, 100, 2.0));
    cases.push_back(band_attention_case(device, 777, 8, 2, 128, 0, 0.0));
    cases.push_back(band_attention_case(device, 1500, 16, 8, 256, 0, 50.0, true));
    cases.push_back(band_attention_case(device, 1111, 16, 8, 256, 300, 50.0, true));
    cases.push_back(band_attention_case(device, 333, 4, 1, 64, 100, 2.0, true));
    // One causal row through cuDNN's rectangles where the build has them: Gemma-2-9B's heads and a
    // 128-wide group of 7 query heads a KV head on two levels of 1,024-row blocks, three levels of 64
    // wide with a bent cap, and blocks of 1,536 (6,144 rows).
    if (cudnn_softcap_compiled()) {
      cases.push_back(softcap_causal_case(device, 4096, 16, 8, 256, 50.0));
      cases.push_back(softcap_causal_case(device, 4096, 28, 4, 128, 30.0));
      cases.push_back(softcap_causal_case(device, 8192, 4, 1, 64, 2.0));
      cases.push_back(softcap_causal_case(device, 6144, 4, 1, 64, 2.0));
      // Windowed rows: Gemma-2-9B's local layers (4,096) at 8,192 rows (4 blocks back), two blocks
      // back at 128 wide, the edge alone, and blocks of 768.
      cases.push_back(softcap_causal_case(device, 8192, 16, 8, 256, 50.0, 4096));
      cases.push_back(softcap_causal_case(device, 4096, 28, 4, 128, 30.0, 2048));
      cases.push_back(softcap_causal_case(device, 3072, 4, 1, 64, 2.0, 1024));
      cases.push_back(softcap_causal_case(device, 6144, 4, 1, 64, 2.0, 1536));
    }
    // Decode steps: Qwen2.5-7B's heads (28 over 4) at batch 1 and 16 against a 1,280-slot cache,
    // Gemma-2's 256-wide heads (16 over 8), 16 query heads per KV head over a long cache, 64 wide.
    cases.push_back(decode_attention_case(device, 1, 28, 4, 1280, 128));
    cases.push_back(decode_attention_case(device, 16, 28, 4, 1280, 128));
    cases.push_back(decode_attention_case(device, 3, 16, 8, 999, 256));
    cases.push_back(decode_attention_case(device, 2, 16, 1, 32768, 128));
    cases.push_back(decode_attention_case(device, 5, 12, 4, 77, 64));
  } else {
    cases.push_back(rms_case(device, 37, 200));
    cases.push_back(swiglu_case(device, 29, 301));
    cases.push_back(swiglu_down_case(device, 29, 301, 40, 4));
    cases.push_back(rms_norm_linear_case(device, 31, 96, 50, 4));
    cases.push_back(rms_norm_mlp_case(device, 29, 40, 64, 4));
    cases.push_back(rms_norm_mlp_case(device, 29, 40, 64, 4, /*skip_output=*/true));
    cases.push_back(rms_norm_mlp_case(device, 29, 40, 64, 4, /*skip_output=*/true, /*dropout=*/0.3));
    cases.push_back(rope_case(device, 61, 6, 2, 16));
    cases.push_back(linear_ce_case(device, 67, 48, 1003, 16));
    cases.push_back(quant4_linear_case(device, 29, 64, 96, Quant4Type::NF4, true));
    cases.push_back(grouped_case(device, 61, 7, 48, 40));
    cases.push_back(combine_case(device, 37, 3, 50));
    cases.push_back(swiglu_packed_case(device, 29, 37));
    cases.push_back(attention_tile_case(device, 3, 13, 40, 9, 2.0));
    cases.push_back(decode_attention_case(device, 3, 6, 2, 37, 64));
  }
  std::vector<SelftestRow> rows;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (const auto& c : cases)
      if (dtype != torch::kFloat32 || !c.sixteen_bit_only) check(c, dtype, path, &rows);
  // 4-bit weights: odd sizes (a short last block, an odd count of values) and large ones.
  if (gpu) {
    check_dequantize(device, 14336, 4096, Quant4Type::NF4, true, path, &rows);
    check_dequantize(device, 4097, 129, Quant4Type::FP4, false, path, &rows);
    check_dequantize(device, 333, 77, Quant4Type::NF4, true, path, &rows);
    check_dropout_mask(device, 4099, 18944, 0.05, path, &rows);
    check_dropout_mask(device, 333, 37, 0.3, path, &rows);
  } else {
    check_dequantize(device, 33, 77, Quant4Type::NF4, true, path, &rows);
  }
  return rows;
}

}  // namespace odyssey::kernels
