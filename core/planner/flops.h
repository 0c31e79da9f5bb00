// Training FLOPs of one optimizer step of a decoder-only model (Qwen2/Qwen2.5, Qwen3,
// Llama-3 shapes from HfModelConfig), and model FLOPs utilization (MFU). Plain arithmetic:
// no LibTorch, no Qt. The side-by-side benchmark (tests/bench/hf_bench.py, odyssey-bench)
// and docs/benchmarks.md use this convention; hf_bench.py carries a Python transcription of
// these formulas — change both together (tst_flops and `hf_bench.py --self-test` assert the
// same reference numbers).
//
// Notation: T tokens in the step (Σ s_i over the samples of a row, or batch × S), s_i the
// length of sample i (attention never crosses samples: padding-free rows and packing with
// per-sample masks), h hidden, i intermediate (MoE: the activated width, activated_mlp_parameters / 3h), L layers, H
// query heads, H_kv KV heads, d head_dim (hidden / H when config.json gives none), q = H·d, kv = H_kv·d, V vocab, r
// LoRA rank. One multiply-add = 2 FLOPs.
//
// Forward, counted:
//   projections   F_lin  = 2·T·L·(h·q + 2·h·kv + q·h + 3·h·i)        q,k,v (GQA widths), o,
//                                                                    gate, up, down
//   lm_head       F_head = 2·T·h·V            (also when tied to the embedding)
//   LoRA adapters F_lora = 2·T·L·Σ_targets r·(in + out)   (A: in→r, B: r→out; 0 for full)
//   attention     F_att  = L · 2 · 2·d·H·Σ s_i² / 2 = 2·d·H·L·Σ s_i²
//                 (QKᵀ and PV are each 2·s²·d FLOPs per head for the full s×s matrix;
//                 causal masking keeps half of it. The exact number of causal pairs is
//                 s(s+1)/2; the s²/2 convention of FlashAttention's and Megatron's
//                 counts is used, 1/s relative difference. Attention FLOPs grow with the
//                 query heads H; GQA shares K/V but does not reduce QKᵀ or PV work.)
// Not counted: the embedding lookup (a gather), RMSNorm, RoPE, SiLU·up, softmax, biases,
// residual adds, the cross-entropy, the optimizer update — all O(T·h) or O(params)
// elementwise work, < 1% at the shapes we train, and conventionally left out of MFU.
//
// Backward:
//   full fine-tuning  B = 2·(F_lin + F_head) + 2·F_att
//                     (every linear needs the input gradient and the weight gradient, each
//                     as large as the forward matmul; attention backward computes dQ, dK,
//                     dV and dP: 2× its forward)
//   LoRA              B = 1·(F_lin + F_head) + 2·F_lora + 2·F_att
//                     (frozen weights need no weight gradient, only the input gradient that
//                     carries the loss down to the adapters; adapters need both; attention
//                     has no weights, so its backward is the same 2× as in full tuning.
//                     The input gradient of layer 0 is counted although nothing below it
//                     trains: HF computes it, enable_input_require_grads)
//
// Model FLOPs = F + B, with F = F_lin + F_head + F_lora + F_att: the work the model needs,
// the numerator of MFU ("model FLOPs", as in the PaLM paper). Full tuning gives
// 6·(N_lin + V·h)·T + 6·d·H·L·Σ s_i², the usual 6·N·T plus attention.
// Hardware FLOPs = model FLOPs + recompute: one more forward (F_lin + F_lora + F_att of a
// layer) for each layer recomputed by activation checkpointing, plus F_head when the loss
// recomputes its logits in backward (chunked cross-entropy). What a GPU actually executes
// is more still: FlashAttention/cuDNN backward recomputes QKᵀ (another ½·F_att), counted in
// neither figure.
//
// MFU = model FLOPs / (step seconds × peak FLOP/s); the peak defaults to an H200's dense
// bf16 tensor-core figure, 989 TFLOP/s (no sparsity). Recomputation therefore lowers MFU:
// that is the point of the convention — it compares programs doing the same training work.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"

namespace odyssey::planner {

// Dense bf16 tensor-core peak of one NVIDIA H200 (SXM), FLOP/s (same as H100 SXM).
inline constexpr double kH200PeakBf16Flops = 989e12;

// The linear projections of a block that carry a LoRA adapter (PEFT's "all-linear" on these
// models = all seven; lm_head never).
struct LoraTargets {
  bool q = true, k = true, v = true, o = true, gate = true, up = true, down = true;
};

struct FlopsOptions {
  bool lora = false;  // false: full fine-tuning (every weight trains)
  std::int64_t lora_rank = 8;
  LoraTargets lora_targets;
  std::int64_t checkpointed_layers = 0;  // layers recomputed in backward (0..L); hardware only
  bool lm_head_recomputed = false;       // chunked loss recomputes logits in backward; hardware only
};

struct StepFlops {
  std::int64_t tokens = 0;     // T
  double attention_pairs = 0;  // Σ s_i²/2: causal query–key pairs per head per layer
  // Forward pieces (FLOPs of the whole step, all layers)
  double linear_forward = 0;     // F_lin: the seven projections of every layer
  double lm_head_forward = 0;    // F_head
  double lora_forward = 0;       // F_lora
  double attention_forward = 0;  // F_att
  double forward = 0;            // sum of the four
  double backward = 0;           // B (see the header comment)
  double model = 0;              // forward + backward: MFU's numerator
  double recompute = 0;          // extra forward from checkpointing (and the loss)
  double hardware = 0;           // model + recompute
  double layer_forward = 0;      // forward of one layer (linear + LoRA + attention)
};

// One sequence of seq_len tokens (batch 1; for batch B of equal rows, pass B·S via
// padding_free_step_flops with B lengths).
StepFlops training_step_flops(const HfModelConfig& m, std::int64_t seq_len, const FlopsOptions& o = {});

// A padding-free row (or a batch) of several samples: linear terms on Σ s_i tokens, the
// attention term per sample (Σ s_i²). Non-positive lengths are ignored.
StepFlops padding_free_step_flops(const HfModelConfig& m, const std::vector<std::int64_t>& sample_lengths,
                                  const FlopsOptions& o = {});

// flops_per_step / (step_seconds × peak); 0 when step_seconds or peak is not positive.
double model_flops_utilization(double flops_per_step, double step_seconds, double peak_flops = kH200PeakBf16Flops);

}  // namespace odyssey::planner
