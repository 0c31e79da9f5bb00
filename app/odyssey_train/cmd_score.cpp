// `score`: each sample's mean next-token loss under a model, as JSON lines. A raw-text sample's
// loss is what transformers gives for model(ids, labels=ids).loss with ids =
// tokenizer(text)["input_ids"]; a conversation's is the loss over the tokens a run trains
// (its chat template's assistant spans), as the run's eval computes it (core/model/score.h);
// tests/core/tst_decoder_parity.cpp checks the first against transformers,
// tests/app/tst_train_run.cpp the second against a run's own eval loss.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "commands.h"
#include "common/json_dump.h"
#include "common/text.h"
#include "config/model_config.h"
#include "config/preset_io.h"
#include "data/dataset.h"
#include "data/tokenize.h"
#ifdef ODYSSEY_HAVE_TORCH
#include "model/score.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "train/lora.h"
#endif

namespace odyssey::cli {

CommandSpec score_spec() {
  return {
      "score",
      "score --model DIR [--adapter A] --data FILE [--config PRESET] [--template NAME | --template-file F]\n"
      "      [--system TEXT] [--max-length N] [--device auto|cpu|cuda] [--dtype auto|float32|bfloat16]\n"
      "      [--no-special-tokens] [--pack-tokens N]",
      "Print each sample's mean next-token loss under a model (JSON lines).",
      "FILE is either raw text, JSON Lines with one {\"text\": \"...\"} object a line (no chat template),\n"
      "or a chat dataset in a format a run trains on (messages, sharegpt or alpaca; .jsonl or .json).\n\n"
      "Raw text is tokenized with the model's tokenizer (special tokens added as transformers'\n"
      "tokenizer(text) adds them, unless --no-special-tokens) and every token after the first is a\n"
      "target, as transformers computes model(ids, labels=ids).loss. A conversation goes through the\n"
      "chat template a run would use and only the tokens a run trains (the assistant's) are targets,\n"
      "so a run's validation file scores as the run's eval does: --config takes a preset or a run's\n"
      "config.yaml for template, template_file, system, max_length and truncation_strategy (the\n"
      "flags override it); without it the model's own template, no system prompt, and the model's\n"
      "max_position_embeddings. Samples longer than max_length are cut or dropped as\n"
      "truncation_strategy says (a warning counts them). One line per scored sample:\n"
      "  {\"index\": I, \"tokens\": N, \"targets\": T, \"loss\": MEAN}   (conversations add \"origin\")\n"
      "where I is the sample's place in the file (from 0; a dropped conversation leaves a gap),\n"
      "MEAN the mean negative log-likelihood (nats) of the targets given the tokens\n"
      "before them; a sample without targets has \"loss\": null. A last line gives the\n"
      "token-weighted total:\n"
      "  {\"total\": {\"samples\": S, \"targets\": T, \"loss\": SUM / T, \"format\": ..., \"device\": ..., ...}}\n\n"
      "--model takes a directory with config.json, safetensors weights and tokenizer.json, or\n"
      "a hub id found in the Hugging Face or ModelScope cache; --adapter a PEFT LoRA adapter (a run's\n"
      "checkpoint) applied unmerged on it. Defaults: CUDA in bfloat16 when\n"
      "a GPU is visible, else the CPU in float32.\n\n"
      "--pack-tokens N scores consecutive samples together, up to N tokens a forward (a longer\n"
      "sample alone), each attending only to itself with its own positions, so its loss is the one\n"
      "it gets alone up to rounding; 0 scores one sample a forward. Default: 8192 on CUDA (varlen\n"
      "flash attention), 0 on the CPU (where a packed row's attention is masked over the whole row).\n\n"
      "Exit codes: 0 scored, 1 the model, tokenizer, template or data could not be read (the message\n"
      "names the file, line and tensor), 2 bad arguments.",
      {{"model", true, false, "DIR", "model directory or hub id"},
       {"adapter", true, false, "DIR", "a PEFT LoRA adapter to score with (unmerged)"},
       {"data", true, false, "FILE", "{\"text\"} JSON lines, or a chat dataset (messages, sharegpt, alpaca)"},
       {"config", true, false, "PRESET", "a preset or a run's config.yaml: its template and length settings"},
       {"template", true, false, "NAME", "chat template: auto, chatml, qwen2_5, qwen3, llama3 or llama3_1"},
       {"template-file", true, false, "F", "a Jinja chat template to use in place of the model's"},
       {"system", true, false, "TEXT", "system prompt for conversations without one"},
       {"max-length", true, false, "N", "longest conversation in tokens (truncation_strategy applies)"},
       {"device", true, false, "DEVICE", "auto (default), cpu or cuda"},
       {"dtype", true, false, "DTYPE", "auto (default), float32 or bfloat16"},
       {"no-special-tokens", false, false, "", "do not add the tokenizer's special tokens"},
       {"pack-tokens", true, false, "N", "tokens scored per forward, several samples packed (0: one sample)"}},
      0,
      0};
}

namespace {

// The texts of FILE.jsonl; errors name file:line.
[[maybe_unused]] bool read_texts(const std::string& path, std::vector<std::string>* texts) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "odyssey-train score: " << path << ": cannot be read (" << std::strerror(errno) << ")\n";
    return false;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (text::trim(line).empty()) continue;
    if (json_nesting_depth(line) > kMaxJsonDepth) {  // nlohmann's parser recurses per level
      std::cerr << path << ":" << n << ": error: JSON nested deeper than " << kMaxJsonDepth << " levels\n";
      return false;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      std::cerr << path << ":" << n << ": error: invalid JSON: " << e.what() << '\n';
      return false;
    }
    auto it = j.is_object() ? j.find("text") : j.end();
    if (!j.is_object() || it == j.end() || !it->is_string()) {
      std::cerr << path << ":" << n << ": error: expected an object with a string \"text\", found "
                << text::quoted(line) << '\n';
      return false;
    }
    texts->push_back(it->get<std::string>());
  }
  return true;
}

// True when FILE holds raw text: a .jsonl whose first non-blank line is an object with a
// "text" key (a bad line is then read_texts' to report). Chat datasets have no "text" key.
[[maybe_unused]] bool holds_text(const std::string& path) {
  if (std::filesystem::path(path).extension() != ".jsonl") return false;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    if (text::trim(line).empty()) continue;
    if (json_nesting_depth(line) > kMaxJsonDepth) return true;  // read_texts refuses it by line
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    return j.is_discarded() || (j.is_object() && j.contains("text"));
  }
  return true;  // empty: read_texts says so
}

}  // namespace

#ifndef ODYSSEY_HAVE_TORCH
int cmd_score(const Args&) {
  std::cerr << "odyssey-train score: this build has no LibTorch (configure with Torch to score)\n";
  return kFailure;
}
#else
int cmd_score(const Args& a) {
  if (!a.has("model") || !a.has("data")) {
    std::cerr << "odyssey-train score: --model and --data are required\n";
    return kUsage;
  }
  const std::string dev = a.value("device", "auto"), dt = a.value("dtype", "auto");
  if (dev != "auto" && dev != "cpu" && dev != "cuda") {
    std::cerr << "odyssey-train score: --device: found " << text::quoted(dev) << ", expected auto, cpu or cuda\n";
    return kUsage;
  }
  if (dt != "auto" && dt != "float32" && dt != "bfloat16") {
    std::cerr << "odyssey-train score: --dtype: found " << text::quoted(dt) << ", expected auto, float32 or bfloat16\n";
    return kUsage;
  }
  // The template and length settings: --config's (a preset or a run's config.yaml), then the flags.
  TrainConfig c;
  if (a.has("config")) {
    Result<LoadedConfig> r = load_preset_file(a.value("config"));
    print_diagnostics(r.diagnostics);
    if (!r.ok()) return kFailure;
    c = r.value.config;
  }
  if (a.has("template")) c.template_name = a.value("template");
  if (a.has("template-file")) c.template_file = std::filesystem::absolute(a.value("template-file")).string();
  if (a.has("system")) c.system = a.value("system");
  if (a.has("max-length")) {
    const std::string v = a.value("max-length");
    const bool digits = !v.empty() && v.size() < 12 && v.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoll(v) < 2) {
      std::cerr << "odyssey-train score: --max-length: found " << text::quoted(v)
                << ", expected a whole number of tokens, at least 2\n";
      return kUsage;
    }
    c.max_length = std::stoll(v);
  }
  std::int64_t pack_tokens = -1;  // -1: the device's default
  if (a.has("pack-tokens")) {
    const std::string v = a.value("pack-tokens");
    const bool digits = !v.empty() && v.size() < 12 && v.find_first_not_of("0123456789") == std::string::npos;
    // A row's sample boundaries are int32 (varlen attention's cu_seqlens).
    if (!digits || std::stoll(v) > std::numeric_limits<std::int32_t>::max()) {
      std::cerr << "odyssey-train score: --pack-tokens: found " << text::quoted(v)
                << ", expected a whole number of tokens from 0 (one sample a forward) to 2147483647\n";
      return kUsage;
    }
    pack_tokens = std::stoll(v);
  }
  const std::string data_path = a.value("data");
  const bool raw = holds_text(data_path);
  std::vector<std::string> texts;
  std::vector<data::Sample> samples;
  std::string format = "text";
  if (raw) {
    if (!read_texts(data_path, &texts)) return kFailure;
    // --config is not named: a run's config.yaml (what the Evaluate page passes) only
    // carries the conversation settings, which raw text does not use.
    for (const char* k : {"template", "template-file", "system", "max-length"})
      if (a.has(k))
        std::cerr << "odyssey-train score: warning: --" << k << " applies to conversations; " << data_path
                  << " is raw text (\"text\" lines), scored without a template\n";
  } else {
    data::LoadOptions lo;
    lo.max_bad_sample_ratio = c.max_bad_sample_ratio;
    Result<data::FileData> f = data::read_dataset_file(data_path, lo);
    print_diagnostics(f.diagnostics);
    if (!f.ok()) return kFailure;
    samples = std::move(f.value.samples);
    format = f.value.report.format;
  }

  const ModelLocation loc = locate_model(a.value("model"), "");
  if (loc.source == ModelLocation::NotFound || loc.source == ModelLocation::BundledShape) {
    std::cerr << "odyssey-train score: model " << text::quoted(a.value("model")) << ": " << loc.describe()
              << "; give a directory with config.json, safetensors weights and tokenizer.json\n";
    return kFailure;
  }
  try {
    const bool cuda = dev == "cuda" || (dev == "auto" && torch::cuda::is_available());
    model::DecoderOptions opts;
    opts.device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    opts.dtype = dt == "float32"    ? torch::kFloat32
                 : dt == "bfloat16" ? torch::kBFloat16
                                    : (cuda ? torch::kBFloat16 : torch::kFloat32);
    Result<Tokenizer> tok = Tokenizer::load(loc.path);
    if (!tok.ok()) {
      print_diagnostics(tok.diagnostics);
      return kFailure;
    }
    // Conversations: tokenized as a run tokenizes them (core/data/tokenize.h), before the
    // weights load, so a template or data problem costs no model load.
    std::vector<data::TokenizedSample> conversations;
    std::string template_name;
    std::int64_t dropped = 0;
    if (!raw) {
      Result<HfModelConfig> mc = load_located_model_config(loc);
      if (!a.has("config") && !a.has("max-length") && mc.ok() && mc.value.max_position_embeddings > 1)
        c.max_length = mc.value.max_position_embeddings;
      auto tmpl =
          data::template_for(c.template_name, tok.value, mc.ok() ? mc.value.family : std::string(), c.template_file);
      print_diagnostics(tmpl.diagnostics);
      if (!tmpl.ok()) return kFailure;
      template_name = tmpl.value.name();
      data::TokenizeOptions to;
      to.max_length = c.max_length;
      to.truncation = data::parse_truncation(c.truncation_strategy).value_or(data::Truncation::Delete);
      to.system = c.system;
      auto t = data::tokenize_samples(samples, tok.value, tmpl.value, to);
      print_diagnostics(t.diagnostics);
      if (!t.ok()) return kFailure;
      std::cerr << "odyssey-train score: " << data::summary(t.value.report) << '\n';
      conversations = std::move(t.value.samples);
      dropped = t.value.report.dropped_too_long + t.value.report.dropped_no_labels;
    }
    Result<model::LoadedModel> m = model::load_causal_lm(loc.path, opts);
    print_diagnostics(m.diagnostics);
    if (!m.ok()) return kFailure;
    model::CausalLM lm = m.value.lm;
    lm->eval();  // no LoRA dropout: an adapter trained with lora_dropout scores as PEFT's eval mode does
    if (a.has("adapter")) {
      const Diagnostics d = train::attach_adapter(lm, a.value("adapter"));
      print_diagnostics(d);
      if (has_errors(d)) return kFailure;
    }
    const bool special = !a.has("no-special-tokens");
    std::int64_t targets = 0;
    double sum = 0;
    auto in_vocabulary = [&](const std::vector<std::int32_t>& ids, const std::string& where) {
      for (std::int32_t id : ids)
        if (id < 0 || id >= m.value.config.hf.vocab_size) {
          std::cerr << data_path << ": " << where << ": token id " << id << " is outside the model's vocabulary ("
                    << m.value.config.hf.vocab_size << ")\n";
          return false;
        }
      return true;
    };
    auto print = [&](std::size_t i, const model::SampleScore& s, const std::string& origin) {
      nlohmann::ordered_json j{{"index", i}};
      if (!origin.empty()) j["origin"] = origin;
      j["tokens"] = s.tokens;
      j["targets"] = s.targets;
      j["loss"] = s.targets ? nlohmann::ordered_json(s.mean()) : nlohmann::ordered_json(nullptr);
      std::cout << dump_json(j) << '\n' << std::flush;
      targets += s.targets;
      sum += s.loss_sum;
    };
    // Every sample is tokenized and checked before the first is scored: a bad one stops the
    // command before any output.
    std::vector<std::vector<std::int32_t> > text_ids;
    std::vector<model::ScoreInput> inputs;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      Result<std::vector<std::int32_t> > ids = tok.value.encode(texts[i], special);
      if (!ids.ok()) {
        std::cerr << data_path << ": sample " << i << ":\n";
        print_diagnostics(ids.diagnostics);
        return kFailure;
      }
      if (!in_vocabulary(ids.value, "sample " + std::to_string(i))) return kFailure;
      text_ids.push_back(std::move(ids.value));
    }
    // The inputs are spans into text_ids: taken once it has stopped growing.
    for (std::size_t i = 0; i < text_ids.size(); ++i) {
      inputs.push_back({text_ids[i], {}});
      index.push_back(i);
    }
    // A conversation's index is its place among the file's samples: one dropped (too long,
    // nothing to train) leaves a gap instead of shifting the ones after it.
    std::unordered_map<std::string, std::size_t> place;
    for (std::size_t i = 0; i < samples.size(); ++i) place.emplace(samples[i].origin, i);
    for (std::size_t i = 0; i < conversations.size(); ++i) {
      const data::TokenizedSample& t = conversations[i];
      if (!in_vocabulary(t.ids, t.origin)) return kFailure;
      const auto at = place.find(t.origin);
      inputs.push_back({t.ids, t.labels});
      index.push_back(at == place.end() ? i : at->second);
    }
    if (pack_tokens < 0) pack_tokens = cuda ? 8192 : 0;
    model::score_samples(lm, inputs, pack_tokens, [&](std::size_t k, const model::SampleScore& s) {
      print(index[k], s, raw ? std::string() : conversations[k].origin);
    });
    using oj = nlohmann::ordered_json;
    oj total{{"samples", raw ? texts.size() : conversations.size()},
             {"targets", targets},
             {"loss", targets ? oj(sum / static_cast<double>(targets)) : oj(nullptr)},
             {"format", format}};
    if (!raw) {
      total["template"] = template_name;
      total["max_length"] = c.max_length;
      total["dropped"] = dropped;
    }
    total.update(oj{{"device", cuda ? "cuda" : "cpu"},
                    {"dtype", opts.dtype == torch::kBFloat16 ? "bfloat16" : "float32"},
                    {"attention_backend", lm->attention_backend_ran()},
                    {"pack_tokens", pack_tokens}});
    if (a.has("adapter")) total["adapter"] = a.value("adapter");
    std::cout << dump_json(oj{{"total", total}}) << '\n';
    return kOk;
  } catch (const std::exception& e) {
    std::cerr << "odyssey-train score: error: " << e.what() << '\n';
    return kFailure;
  }
}
#endif

}  // namespace odyssey::cli
