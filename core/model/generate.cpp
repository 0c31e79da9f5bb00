#include "model/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/text.h"
#include "tokenizer/tokenizer.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace odyssey::model {

namespace {

struct Row {
  std::vector<std::int32_t> seen;  // prompt + new tokens (repetition penalty)
  std::size_t streamed = 0;        // bytes of `text` handed to the callback
  bool done = false;
};

// transformers' RepetitionPenaltyLogitsProcessor on one row: every token seen so far (prompt
// and new tokens) gets its logit divided by the penalty when positive, multiplied when not.
void penalize(torch::Tensor row, const std::vector<std::int32_t>& seen, double penalty) {
  if (seen.empty()) return;
  const torch::Tensor idx =
      torch::tensor(std::vector<std::int64_t>(seen.begin(), seen.end()), torch::kInt64).to(row.device());
  const torch::Tensor s = row.gather(0, idx);
  row.scatter_(0, idx, torch::where(s < 0, s * penalty, s / penalty));
}

// The next token of every row from logits [B, V] (fp32), transformers' processors in
// generate()'s order: repetition penalty, temperature, top-k, top-p, min-p.
torch::Tensor choose(torch::Tensor logits, const std::vector<Row>& rows, const SamplingOptions& o, at::Generator& gen) {
  if (o.repetition_penalty != 1.0)
    for (std::int64_t b = 0; b < logits.size(0); ++b)
      penalize(logits[b], rows[static_cast<std::size_t>(b)].seen, o.repetition_penalty);
  if (o.greedy()) return logits.argmax(-1);
  logits = logits / o.temperature;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const std::int64_t vocab = logits.size(-1);
  if (o.top_k > 0 && o.top_k < vocab) {  // TopKLogitsWarper: below the k-th largest
    const torch::Tensor kth = std::get<0>(logits.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, neg_inf);
  }
  if (o.top_p < 1.0) {  // TopPLogitsWarper: ascending sort, drop the tail whose mass is <= 1 - top_p
    auto [sorted, order] = logits.sort(-1, /*descending=*/false);
    const torch::Tensor cum = sorted.softmax(-1).cumsum(-1);
    torch::Tensor drop = cum <= (1.0 - o.top_p);
    drop.narrow(-1, vocab - 1, 1).fill_(false);  // the most likely token always stays
    logits = logits.masked_fill(drop.scatter(-1, order, drop), neg_inf);
  }
  if (o.min_p > 0.0) {  // MinPLogitsWarper: less likely than min_p x the top probability
    const torch::Tensor p = logits.softmax(-1);
    const torch::Tensor floor = p.amax(-1, true) * o.min_p;
    logits = logits.masked_fill(p < floor, neg_inf);
  }
  // A draw from softmax(logits): argmax of p / E with E ~ Exp(1) per token (the exponential
  // race), drawn from this generation's own generator on the model's device.
  const torch::Tensor p = logits.softmax(-1);
  torch::Tensor e = torch::empty_like(p);
  e.exponential_(1.0, gen);
  return (p / e).argmax(-1);
}

// Whether `text` ends in the middle of a UTF-8 character (the decoder then shows U+FFFD).
bool incomplete_utf8(const std::string& text) { return text.ends_with("\xEF\xBF\xBD"); }

// Decode steps through CausalLMImpl::decode_step: the inputs in fixed device buffers, and on
// CUDA the step captured in a graph on its second use (the first runs eagerly and warms the
// kernels up) and replayed from then on: one launch per step instead of a thousand.
class StaticDecoder {
 public:
  StaticDecoder(CausalLM& lm, KvCache& cache, bool graph) : lm_(lm), cache_(cache), graph_(graph) {
    const auto o = torch::TensorOptions().dtype(torch::kInt64).device(lm->options().device);
    ids_ = torch::zeros({cache.batch(), 1}, o);
    pos_ = torch::zeros({cache.batch(), 1}, o);
    slot_ = torch::zeros({1}, o);
  }
  // Logits [B, V] of the tokens `next` at positions `pos` written to cache slot `slot`.
  torch::Tensor step(const std::vector<std::int64_t>& next, const std::vector<std::int64_t>& pos, std::int64_t slot) {
    const auto b = static_cast<std::int64_t>(next.size());
    ids_.copy_(torch::tensor(next, torch::kInt64).view({b, 1}), /*non_blocking=*/false);
    pos_.copy_(torch::tensor(pos, torch::kInt64).view({b, 1}), false);
    slot_.fill_(slot);
    if (!graph_) return run();
    if (steps_++ == 0) return run();  // warm-up: lazy initialisations happen outside the capture
    if (!captured_) {
      graph_obj_ = std::make_unique<at::cuda::CUDAGraph>();
      graph_obj_->capture_begin();
      logits_ = run();
      graph_obj_->capture_end();
      captured_ = true;
    }
    graph_obj_->replay();
    return logits_;
  }

 private:
  torch::Tensor run() {
    const torch::Tensor h = lm_->decode_step(ids_, pos_, slot_, cache_);
    return lm_->logits(h.select(1, 0)).to(torch::kFloat32);
  }
  CausalLM& lm_;
  KvCache& cache_;
  bool graph_;
  torch::Tensor ids_, pos_, slot_, logits_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_obj_;
  bool captured_ = false;
  std::int64_t steps_ = 0;
};

}  // namespace

Diagnostics check_generation_options(const GenerationOptions& o) {
  Diagnostics d;
  const SamplingOptions& s = o.sampling;
  if (o.max_new_tokens < 1)
    d.push_back(error_at({}, "max_new_tokens", "expected at least 1, found " + std::to_string(o.max_new_tokens)));
  if (!(s.temperature >= 0.0) || !std::isfinite(s.temperature))
    d.push_back(
        error_at({}, "temperature", "expected a number >= 0 (0: greedy), found " + text::format_double(s.temperature)));
  if (s.top_k < 0) d.push_back(error_at({}, "top_k", "expected 0 (off) or more, found " + std::to_string(s.top_k)));
  if (!(s.top_p > 0.0 && s.top_p <= 1.0))
    d.push_back(error_at({}, "top_p", "expected a number in (0, 1], found " + text::format_double(s.top_p)));
  if (!(s.min_p >= 0.0 && s.min_p <= 1.0))
    d.push_back(error_at({}, "min_p", "expected a number in [0, 1], found " + text::format_double(s.min_p)));
  if (!(s.repetition_penalty > 0.0) || !std::isfinite(s.repetition_penalty))
    d.push_back(error_at({}, "repetition_penalty",
                         "expected a number > 0 (1: off), found " + text::format_double(s.repetition_penalty)));
  for (const std::string& stop : o.stop)
    if (stop.empty()) d.push_back(error_at({}, "stop", "a stop string is empty"));
  return d;
}

Result<std::vector<GenerationResult>> generate(CausalLM& lm, const std::vector<std::vector<std::int32_t>>& prompts,
                                               const GenerationOptions& o, const Tokenizer* tokenizer,
                                               const TokenCallback& on_token, const std::atomic<bool>* cancel) {
  Result<std::vector<GenerationResult>> r;
  r.diagnostics = check_generation_options(o);
  if (!o.stop.empty() && tokenizer == nullptr)
    r.diagnostics.push_back(error_at({}, "stop", "stop strings need the tokenizer"));
  const std::int64_t vocab = lm->config().hf.vocab_size;
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    const std::string where = "prompt " + std::to_string(i);
    if (p.empty()) r.diagnostics.push_back(error_at({}, where, "is empty: a prompt needs at least one token"));
    for (std::int32_t id : p)
      if (id < 0 || id >= vocab) {
        r.diagnostics.push_back(error_at(
            {}, where,
            "token id " + std::to_string(id) + " is outside the model's vocabulary (" + std::to_string(vocab) + ")"));
        break;
      }
    if (o.max_positions > 0 && static_cast<std::int64_t>(p.size()) >= o.max_positions)
      r.diagnostics.push_back(error_at({}, where,
                                       std::to_string(p.size()) +
                                           " tokens leave no room for a new one: the model "
                                           "takes " +
                                           std::to_string(o.max_positions) + " positions (max_position_embeddings)"));
    longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(p.size()));
  }
  if (!r.ok() || prompts.empty()) return r;

  torch::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const std::int64_t batch = static_cast<std::int64_t>(prompts.size());
  std::int64_t steps = o.max_new_tokens;
  if (o.max_positions > 0) steps = std::min(steps, o.max_positions - longest);
  const torch::Device dev = lm->options().device;

  // Left-padded prompts, their mask and positions (cumsum(mask) - 1, 0 on padding).
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * longest), 0), mask(ids.size(), 0), pos(ids.size(), 0);
  std::vector<Row> rows(prompts.size());
  r.value.resize(prompts.size());
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    const auto& p = prompts[b];
    const std::int64_t pad = longest - static_cast<std::int64_t>(p.size());
    for (std::size_t j = 0; j < p.size(); ++j) {
      const std::size_t at = b * static_cast<std::size_t>(longest) + static_cast<std::size_t>(pad) + j;
      ids[at] = p[j];
      mask[at] = 1;
      pos[at] = static_cast<std::int64_t>(j);
    }
    rows[b].seen = p;
    r.value[b].prompt_tokens = static_cast<std::int64_t>(p.size());
  }
  auto tensor = [&](const std::vector<std::int64_t>& v, std::int64_t cols) {
    return torch::tensor(v, torch::kInt64).view({batch, cols}).to(dev);
  };
  // A side stream on CUDA: graphs are captured on a stream other than the default one.
  std::optional<c10::cuda::CUDAStreamGuard> on_stream;
  if (dev.is_cuda())
    on_stream.emplace(c10::cuda::getStreamFromPool(false, dev.has_index() ? dev.index() : c10::cuda::current_device()));
  const bool static_steps =
      lm->static_decode_supported() &&
      (o.decode == GenerationOptions::Decode::Static || (o.decode == GenerationOptions::Decode::Auto && dev.is_cuda()));
  // Static steps attend over the whole cache: its length rounded up to 64 slots (aligned rows
  // for the attention kernels; the extra slots stay masked).
  const std::int64_t capacity = static_steps ? (longest + steps + 63) / 64 * 64 : longest + steps;
  KvCache cache = lm->allocate_cache(batch, capacity);
  std::optional<StaticDecoder> decoder;
  if (static_steps) decoder.emplace(lm, cache, dev.is_cuda() && o.cuda_graph);
  torch::Tensor hidden =
      lm->hidden_states_cached(tensor(ids, longest), tensor(pos, longest), tensor(mask, longest), cache);
  torch::Tensor logits = lm->logits(hidden.narrow(1, hidden.size(1) - 1, 1).squeeze(1)).to(torch::kFloat32);
  at::Generator gen = at::globalContext().defaultGenerator(dev).clone();
  gen.set_current_seed(o.sampling.seed);

  std::size_t longest_stop = 0;
  for (const std::string& s : o.stop) longest_stop = std::max(longest_stop, s.size());
  const bool track_text = tokenizer && (!o.stop.empty() || on_token);
  std::vector<std::int64_t> next_pos(prompts.size());
  for (std::size_t b = 0; b < prompts.size(); ++b) next_pos[b] = static_cast<std::int64_t>(prompts[b].size());

  std::size_t active = prompts.size();
  for (std::int64_t step = 0; step < steps && active > 0; ++step) {
    const torch::Tensor chosen = choose(logits, rows, o.sampling, gen).to(torch::kCPU);
    const double now = since_start();
    bool cancelled = cancel && cancel->load();
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      Row& row = rows[b];
      if (row.done) continue;
      GenerationResult& res = r.value[b];
      const auto id = static_cast<std::int32_t>(chosen[static_cast<std::int64_t>(b)].item<std::int64_t>());
      res.ids.push_back(id);
      row.seen.push_back(id);
      if (res.ids.size() == 1) res.first_token_seconds = now;
      res.seconds = now;
      std::string delta;
      if (track_text) {
        res.text = tokenizer->decode(res.ids, o.skip_special_tokens);
        // A stop string may end inside this token's text; search from where it could start.
        const std::size_t from = row.streamed > longest_stop ? row.streamed - longest_stop : 0;
        std::size_t cut = std::string::npos;
        for (const std::string& s : o.stop) {
          const std::size_t at = res.text.find(s, from);
          if (at != std::string::npos && at < cut) {
            cut = at;
            res.stop_string = s;
          }
        }
        if (cut != std::string::npos) {
          res.text.resize(cut);
          res.finish_reason = "stop";
        }
        // Streamed: what can no longer change (a possible stop string's start is held back).
        std::size_t ready = res.text.size();
        if (res.finish_reason.empty() && longest_stop > 1)
          ready = ready > longest_stop - 1 ? ready - (longest_stop - 1) : 0;
        if (res.finish_reason.empty() && incomplete_utf8(res.text)) ready = std::min(ready, res.text.size() - 3);
        if (ready > row.streamed) {
          delta = res.text.substr(row.streamed, ready - row.streamed);
          row.streamed = ready;
        }
      }
      if (res.finish_reason.empty() && !o.ignore_eos &&
          std::find(o.eos_ids.begin(), o.eos_ids.end(), id) != o.eos_ids.end())
        res.finish_reason = "stop";
      if (res.finish_reason.empty() && step + 1 == steps) res.finish_reason = "length";
      if (!res.finish_reason.empty() && track_text && row.streamed < res.text.size()) {
        delta += res.text.substr(row.streamed);
        row.streamed = res.text.size();
      }
      if (on_token && !on_token(b, id, delta)) cancelled = true;
      if (!res.finish_reason.empty()) {
        row.done = true;
        --active;
      }
    }
    if (cancelled) {
      for (std::size_t b = 0; b < prompts.size(); ++b)
        if (!rows[b].done) r.value[b].finish_reason = "cancelled";
      break;
    }
    if (active == 0 || step + 1 == steps) break;
    // Finished rows take part in the step with their last token (their output is not read).
    std::vector<std::int64_t> next(prompts.size()), npos(prompts.size());
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      next[b] = r.value[b].ids.back();
      npos[b] = next_pos[b]++;
    }
    if (decoder) {
      logits = decoder->step(next, npos, longest + step);
    } else {
      hidden = lm->hidden_states_cached(tensor(next, 1), tensor(npos, 1), {}, cache);
      logits = lm->logits(hidden.select(1, 0)).to(torch::kFloat32);
    }
  }
  if (tokenizer && !track_text)
    for (GenerationResult& res : r.value) res.text = tokenizer->decode(res.ids, o.skip_special_tokens);
  return r;
}

Result<std::vector<std::int32_t>> generation_eos_ids(const std::string& model_dir, const Tokenizer* tokenizer) {
  Result<std::vector<std::int32_t>> r;
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string file = (std::filesystem::path(model_dir) / name).string();
    std::ifstream in(file, std::ios::binary);
    if (!in) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      r.diagnostics.push_back(error_at(file, "", std::string("invalid JSON: ") + e.what()));
      return r;
    }
    if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) continue;
    const nlohmann::json& v = j["eos_token_id"];
    auto add = [&](const nlohmann::json& x) {
      if (!x.is_number_integer() || x.get<std::int64_t>() < 0) {
        r.diagnostics.push_back(
            error_at(file, "eos_token_id", "expected a token id or a list of them, found " + x.dump()));
        return;
      }
      r.value.push_back(static_cast<std::int32_t>(x.get<std::int64_t>()));
    };
    if (v.is_array())
      for (const auto& x : v) add(x);
    else add(v);
    return r;
  }
  if (tokenizer)
    if (auto id = tokenizer->eos_id()) r.value.push_back(*id);
  return r;
}

}  // namespace odyssey::model
