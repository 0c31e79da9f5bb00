// Text generation with a CausalLM (docs/inference.md): prefill the prompts into a KV cache,
// then decode one token per step for every row, choosing each by transformers' logits
// processors in their order — repetition penalty, temperature, top-k, top-p, min-p — greedily
// (temperature 0) or by sampling with a seeded generator of the model's device.
//
// A batch of prompts of different lengths is left-padded as transformers pads it for
// generate(): position ids count real tokens only (cumsum(mask) - 1), padding slots are never
// attended. Greedy continuations are token-identical to transformers' generate(do_sample=False)
// in fp32 (tests/core/tst_generate.cpp against tests/reference/generate_oracle.py).
//
// A row stops at an end-of-sequence id (kept as its last token, as transformers keeps it), at
// a stop string (its text is cut just before the string; its ids end with the token that
// completed it), at max_new_tokens, or at the model's position limit.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "model/decoder.h"

namespace odyssey {
class Tokenizer;
}

namespace odyssey::model {

struct SamplingOptions {
  double temperature = 0.0;         // 0: greedy (argmax), else divide the logits by it and sample
  std::int64_t top_k = 0;           // keep the k most likely tokens (0: off)
  double top_p = 1.0;               // keep the smallest set whose probability reaches top_p (1: off)
  double min_p = 0.0;               // drop tokens less likely than min_p x the most likely (0: off)
  double repetition_penalty = 1.0;  // CTRL's: a seen token's logit / p if positive, x p if negative
  std::uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0; }
};

struct GenerationOptions {
  std::int64_t max_new_tokens = 256;
  SamplingOptions sampling;
  std::vector<std::int32_t> eos_ids;  // generation_config.json's eos_token_id (generation_eos_ids)
  bool ignore_eos = false;
  std::vector<std::string> stop;  // stop strings (needs a tokenizer)
  // The longest sequence (prompt + new tokens) the model takes; 0: no limit. A prompt longer
  // than this is an error; generation stops at it with finish_reason "length".
  std::int64_t max_positions = 0;
  bool skip_special_tokens = true;  // in `text`
  // How decode steps run. Auto: on CUDA, the static step (CausalLMImpl::decode_step) captured
  // once in a CUDA graph and replayed (where the model's RoPE allows it; else eager); on the CPU,
  // eager. Eager: hidden_states_cached per step. Static: decode_step per step, with a graph on
  // CUDA (the CPU runs the same step without one; tests use it).
  enum class Decode { Auto, Eager, Static } decode = Decode::Auto;
  // Static steps on CUDA are captured in a CUDA graph and replayed; false runs each one
  // eagerly (the same kernels, launched one by one: for profiling them).
  bool cuda_graph = true;
};

struct GenerationResult {
  std::vector<std::int32_t> ids;  // the new tokens only
  std::string text;               // their text (cut before a stop string)
  // "stop" (an end-of-sequence id or a stop string), "length" (max_new_tokens or the model's
  // positions), "cancelled".
  std::string finish_reason;
  std::string stop_string;  // the stop string met, if any
  std::int64_t prompt_tokens = 0;
  double first_token_seconds = 0.0;  // from the start of the batch to this row's first token
  double seconds = 0.0;              // from the start of the batch to this row's last token
};

// Called for each new token of each row, in order, with the text it adds (possibly empty while a
// multi-byte character or a possible stop string is incomplete). Return false to cancel.
using TokenCallback = std::function<bool(std::size_t row, std::int32_t id, const std::string& text_delta)>;

// Generates for every prompt (token ids, at least one each) in one batch. `tokenizer` decodes
// `text` and matches stop strings (null: no text, no stop strings). Errors: a prompt that is
// empty, holds an id outside the vocabulary or exceeds max_positions; options out of range.
Result<std::vector<GenerationResult>> generate(CausalLM& lm, const std::vector<std::vector<std::int32_t>>& prompts,
                                               const GenerationOptions& options, const Tokenizer* tokenizer,
                                               const TokenCallback& on_token = {},
                                               const std::atomic<bool>* cancel = nullptr);

// The options' own errors (ranges), naming the option ("temperature", "top_p", ...).
Diagnostics check_generation_options(const GenerationOptions& options);

// The end-of-sequence ids of a model directory, as transformers' generate takes them:
// generation_config.json's eos_token_id (an id or a list), else config.json's, else the
// tokenizer's eos token. Errors name the file and key when a value is not an id or a list.
Result<std::vector<std::int32_t>> generation_eos_ids(const std::string& model_dir, const Tokenizer* tokenizer);

}  // namespace odyssey::model
