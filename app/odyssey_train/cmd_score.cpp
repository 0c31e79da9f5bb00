// `score`: each sample's mean next-token loss under a model, as JSON lines. The loss of a
// sample is what transformers gives for model(ids, labels=ids).loss with ids =
// tokenizer(text)["input_ids"] (core/model/score.h); tests/core/tst_decoder_parity.cpp
// checks it against transformers.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common/json_dump.h"
#include "common/text.h"
#include "config/model_config.h"
#ifdef ODYSSEY_HAVE_TORCH
#include "model/score.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "train/lora.h"
#endif

namespace odyssey::cli {

CommandSpec score_spec() {
  return {"score",
          "score --model DIR [--adapter A] --data FILE.jsonl [--device auto|cpu|cuda]\n"
          "      [--dtype auto|float32|bfloat16] [--no-special-tokens]",
          "Print each sample's mean next-token loss under a model (JSON lines).",
          "Reads FILE.jsonl, one {\"text\": \"...\"} object a line (raw text, no chat template),\n"
          "tokenizes each text with the model's tokenizer (special tokens added as transformers'\n"
          "tokenizer(text) adds them, unless --no-special-tokens) and prints one line per sample:\n"
          "  {\"index\": I, \"tokens\": N, \"targets\": N-1, \"loss\": MEAN}\n"
          "where MEAN is the mean negative log-likelihood (nats) of tokens 2..N given the ones\n"
          "before, as transformers computes model(ids, labels=ids).loss; a sample of fewer than\n"
          "2 tokens has \"loss\": null. A last line gives the token-weighted total:\n"
          "  {\"total\": {\"samples\": S, \"targets\": T, \"loss\": SUM / T, \"device\": ..., ...}}\n\n"
          "--model takes a directory with config.json, safetensors weights and tokenizer.json, or\n"
          "a hub id found in the Hugging Face or ModelScope cache; --adapter a PEFT LoRA adapter (a run's\n"
          "checkpoint) applied unmerged on it. Defaults: CUDA in bfloat16 when\n"
          "a GPU is visible, else the CPU in float32.\n\n"
          "Exit codes: 0 scored, 1 the model, tokenizer or data could not be read (the message\n"
          "names the file, line and tensor), 2 bad arguments.",
          {{"model", true, false, "DIR", "model directory or hub id"},
           {"adapter", true, false, "DIR", "a PEFT LoRA adapter to score with (unmerged)"},
           {"data", true, false, "FILE", "JSON lines with a \"text\" field"},
           {"device", true, false, "DEVICE", "auto (default), cpu or cuda"},
           {"dtype", true, false, "DTYPE", "auto (default), float32 or bfloat16"},
           {"no-special-tokens", false, false, "", "do not add the tokenizer's special tokens"}},
          0,
          0};
}

namespace {

// The texts of FILE.jsonl; errors name file:line.
[[maybe_unused]] bool read_texts(const std::string& path, std::vector<std::string>* texts) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "odyssey-train score: " << path << ": cannot be read\n";
    return false;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (text::trim(line).empty()) continue;
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
  std::vector<std::string> texts;
  if (!read_texts(a.value("data"), &texts)) return kFailure;

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
    Result<model::LoadedModel> m = model::load_causal_lm(loc.path, opts);
    print_diagnostics(m.diagnostics);
    if (!m.ok()) return kFailure;
    model::CausalLM lm = m.value.lm;
    if (a.has("adapter")) {
      const Diagnostics d = train::attach_adapter(lm, a.value("adapter"));
      print_diagnostics(d);
      if (has_errors(d)) return kFailure;
    }
    const bool special = !a.has("no-special-tokens");
    std::int64_t targets = 0;
    double sum = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      Result<std::vector<std::int32_t> > ids = tok.value.encode(texts[i], special);
      if (!ids.ok()) {
        std::cerr << a.value("data") << ": sample " << i << ":\n";
        print_diagnostics(ids.diagnostics);
        return kFailure;
      }
      for (std::int32_t id : ids.value)
        if (id < 0 || id >= m.value.config.hf.vocab_size) {
          std::cerr << a.value("data") << ": sample " << i << ": token id " << id
                    << " is outside the model's vocabulary (" << m.value.config.hf.vocab_size << ")\n";
          return kFailure;
        }
      const model::SampleScore s = model::score_tokens(lm, ids.value);
      nlohmann::ordered_json j{{"index", i}, {"tokens", s.tokens}, {"targets", s.targets}};
      j["loss"] = s.targets ? nlohmann::ordered_json(s.mean()) : nlohmann::ordered_json(nullptr);
      std::cout << dump_json(j) << '\n' << std::flush;
      targets += s.targets;
      sum += s.loss_sum;
    }
    using oj = nlohmann::ordered_json;
    oj total{{"samples", texts.size()},
             {"targets", targets},
             {"loss", targets ? oj(sum / static_cast<double>(targets)) : oj(nullptr)},
             {"device", cuda ? "cuda" : "cpu"},
             {"dtype", opts.dtype == torch::kBFloat16 ? "bfloat16" : "float32"},
             {"attention_backend", lm->attention_backend_ran()}};
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
