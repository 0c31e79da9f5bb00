// `generate`: a prompts file through a model (and adapter) in batches, one JSON line out per
// prompt line in (core/infer, core/model/generate.h; docs/inference.md).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common/json_dump.h"
#include "common/text.h"
#include "infer_args.h"
#ifdef ODYSSEY_HAVE_TORCH
#include "infer/request.h"
#endif

namespace odyssey::cli {

CommandSpec generate_spec() {
  std::vector<OptionSpec> options = inference_options();
  options.insert(options.begin() + 2, {"prompts", true, false, "F.jsonl", "the prompts, one JSON object a line"});
  options.insert(options.begin() + 3,
                 {"out", true, false, "R.jsonl", "where the results go (default: standard output)"});
  options.push_back({"batch-size", true, false, "N", "prompts generated together (default 8)"});
  return {
      "generate",
      "generate --model M [--adapter A] --prompts F.jsonl [--out R.jsonl] [--max-new-tokens N]\n"
      "         [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] [--seed N]\n"
      "         [--stop TEXT]... [--ignore-eos] [--batch-size N]",
      "Continue a file of prompts with a model (and a LoRA adapter): one JSON line per prompt.",
      "Each line of F.jsonl is {\"prompt\": \"...\"} (raw text: no chat template, the tokenizer's special\n"
      "tokens added as tokenizer(text) adds them) or {\"messages\": [...]} (optionally \"tools\"): rendered\n"
      "through the chat template with the assistant's generation prompt. A conversation that ends with an\n"
      "assistant turn (a dataset record) is prompted without it and the turn is echoed as \"reference\".\n"
      "{\"prompt_ids\": [ids]} gives the token ids themselves.\n"
      "An \"id\" is echoed; other fields are ignored. Blank lines are skipped.\n\n"
      "One line per prompt, in order:\n"
      "  {\"index\": I, \"text\": ..., \"ids\": [new token ids], \"finish_reason\": \"stop\"|\"length\",\n"
      "   \"prompt_tokens\": N, \"new_tokens\": N, \"tokens_per_s\": X, \"time_to_first_token_s\": X, \"seconds\": X}\n"
      "(\"stop\": the stop string met; \"id\", \"reference\" when given). finish_reason \"stop\": an end-of-\n"
      "sequence token (generation_config.json's eos_token_id; kept as the last id) or a stop string (the\n"
      "text ends just before it); \"length\": --max-new-tokens or the model's positions. tokens_per_s is\n"
      "the prompt's new tokens over the time from its batch's start (prefill included) to its last token.\n"
      "Greedy by default (--temperature 0); the results equal transformers' generate(do_sample=False).\n\n"
      "Exit codes: 0 done, 1 the model, adapter or prompts could not be used (every bad line is named,\n"
      "before the model loads), 2 usage.",
      options,
      0,
      0};
}

#ifndef ODYSSEY_HAVE_TORCH
int cmd_generate(const Args&) {
  std::cerr << "odyssey-train generate: this build has no LibTorch (configure with Torch to generate)\n";
  return kFailure;
}
#else
int cmd_generate(const Args& a) {
  if (!a.has("model") || !a.has("prompts")) {
    std::cerr << "odyssey-train generate: --model and --prompts are required\n" << command_help(generate_spec());
    return kUsage;
  }
  model::GenerationOptions flags;
  if (!apply_sampling_flags(a, "generate", &flags)) return kUsage;
  std::optional<bool> thinking;
  if (!thinking_flag(a, "generate", &thinking)) return kUsage;
  std::size_t batch_size = 8;
  if (a.has("batch-size")) {
    const auto v = text::parse_int(a.value("batch-size"));
    if (!v || *v < 1) {
      std::cerr << "odyssey-train generate: --batch-size: found " << text::quoted(a.value("batch-size"))
                << ", expected a whole number >= 1\n";
      return kUsage;
    }
    batch_size = static_cast<std::size_t>(*v);
  }

  // Every line is checked before the model loads.
  const std::string path = a.value("prompts");
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || std::filesystem::is_directory(path, ec)) {
    std::cerr << path << ": error: cannot be read\n";
    return kFailure;
  }
  std::vector<infer::Request> requests;
  std::vector<std::string> where;  // "FILE:LINE" of each request
  Diagnostics bad;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (text::trim(line).empty()) continue;
    where.push_back(path + ":" + std::to_string(n));
    auto r = infer::parse_request(line, infer::RequestKind::PromptLine, {}, where.back());
    bad.insert(bad.end(), r.diagnostics.begin(), r.diagnostics.end());
    if (r.ok()) requests.push_back(std::move(r.value));
    else where.pop_back();
  }
  if (has_errors(bad)) {
    print_diagnostics(bad);
    return kFailure;
  }
  if (requests.empty()) {
    std::cerr << path
              << ": error: no prompts (expected one {\"prompt\": ...} or {\"messages\": [...]} object a line)\n";
    return kFailure;
  }

  auto session = infer::Session::open(session_options(a));
  print_diagnostics(session.diagnostics);
  if (!session.ok()) return kFailure;
  infer::Session& s = *session.value;
  model::GenerationOptions options = s.defaults();
  flags.eos_ids = options.eos_ids;
  flags.max_positions = options.max_positions;
  options = flags;

  std::vector<std::vector<std::int32_t> > ids(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto enc = s.encode(requests[i].prompt, thinking);
    for (auto& d : enc.diagnostics)
      if (d.file.empty()) d.file = where[i];
    bad.insert(bad.end(), enc.diagnostics.begin(), enc.diagnostics.end());
    if (enc.ok()) ids[i] = std::move(enc.value);
  }
  if (has_errors(bad)) {
    print_diagnostics(bad);
    return kFailure;
  }

  std::ofstream file;
  std::ostream* out = &std::cout;
  if (a.has("out") && a.value("out") != "-") {
    file.open(a.value("out"), std::ios::binary | std::ios::trunc);
    if (!file) {
      std::cerr << a.value("out") << ": error: cannot be written\n";
      return kFailure;
    }
    out = &file;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t new_tokens = 0;
  try {
    for (std::size_t first = 0; first < requests.size(); first += batch_size) {
      const std::size_t n = std::min(batch_size, requests.size() - first);
      const std::vector<std::vector<std::int32_t> > batch(ids.begin() + static_cast<std::ptrdiff_t>(first),
                                                          ids.begin() + static_cast<std::ptrdiff_t>(first + n));
      auto r = model::generate(s.lm(), batch, options, &s.tokenizer());
      if (!r.ok()) {
        for (auto& d : r.diagnostics)
          if (d.key.starts_with("prompt ")) {  // "prompt 3" of the batch: name the input line instead
            d.file = where[first + std::stoul(d.key.substr(7))];
            d.key = "prompt";
          }
        print_diagnostics(r.diagnostics);
        return kFailure;
      }
      for (std::size_t k = 0; k < n; ++k) {
        const model::GenerationResult& g = r.value[k];
        const infer::Request& q = requests[first + k];
        nlohmann::ordered_json j;
        j["index"] = first + k;
        if (!q.id.is_null()) j["id"] = q.id;
        append_result(j, g);
        if (!q.reference.empty()) j["reference"] = q.reference;
        *out << dump_json(j) << '\n' << std::flush;
        new_tokens += static_cast<std::int64_t>(g.ids.size());
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "odyssey-train generate: error: " << e.what() << '\n';
    return kFailure;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "odyssey-train generate: " << requests.size() << " prompts, " << new_tokens << " new tokens in "
            << text::format_double(secs) << " s ("
            << text::format_double(secs > 0 ? static_cast<double>(new_tokens) / secs : 0.0) << " tokens/s) on "
            << s.device() << " in " << s.dtype() << (s.adapter().empty() ? std::string() : ", adapter " + s.adapter())
            << '\n';
  return kOk;
}
#endif

}  // namespace odyssey::cli
