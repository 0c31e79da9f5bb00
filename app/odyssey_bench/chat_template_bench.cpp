// odyssey-bench --chat-template: the data pipeline's side of docs/tokenizer.md's chat-template
// benchmark. A dataset file is read, rendered through a chat template and tokenized with the
// trained mask, exactly as a run prepares its samples (data::read_dataset_file,
// data::template_for, data::tokenize_samples); tests/bench/chat_template_bench.py times
// transformers' apply_chat_template(tokenize=True) on the same file and compares the ids'
// digest with the one printed here.
#include "chat_template_bench.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "common/diagnostic.h"
#include "common/sha256.h"
#include "data/dataset.h"
#include "data/tokenize.h"
#include "provenance.h"
#include "tokenizer/tokenizer.h"

namespace odyssey::bench {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int chat_template_bench(int argc, char** argv) {
  std::string data_file, tokenizer_file, template_file, template_name = "auto", out;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--chat-template") data_file = next();
    else if (a == "--tokenizer") tokenizer_file = next();
    else if (a == "--template-file") template_file = next();
    else if (a == "--template") template_name = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--out") out = next();
    else throw std::invalid_argument("unknown option " + a + " (--chat-template mode)");
  }
  if (data_file.empty() || tokenizer_file.empty())
    throw std::invalid_argument("--chat-template DATA.jsonl needs --tokenizer TOKENIZER_JSON");

  auto tok = Tokenizer::load(tokenizer_file);
  if (!tok.ok()) {
    std::cerr << format_all(tok.diagnostics);
    return 1;
  }
  const auto t_load = std::chrono::steady_clock::now();
  data::LoadOptions lo;
  lo.max_bad_sample_ratio = 0.0;
  auto loaded = data::read_dataset_file(data_file, lo);
  if (!loaded.ok()) {
    std::cerr << format_all(loaded.diagnostics);
    return 1;
  }
  const double load_s = seconds_since(t_load);
  // A tokenizer.json alone has no chat_template: auto without a file is the family's built-in
  // Qwen2.5 renderer (the fast path); with --template-file the Jinja engine renders the file.
  auto tmpl = data::template_for(template_name, tok.value, "qwen2", template_file);
  if (!tmpl.ok()) {
    std::cerr << format_all(tmpl.diagnostics);
    return 1;
  }
  data::TokenizeOptions o;
  o.max_length = std::int64_t{1} << 24;
  o.threads = threads;
  const auto t_tok = std::chrono::steady_clock::now();
  auto result = data::tokenize_samples(loaded.value.samples, tok.value, tmpl.value, o);
  const double tokenize_s = seconds_since(t_tok);
  if (!result.ok()) {
    std::cerr << format_all(result.diagnostics);
    return 1;
  }
  // The ids of every conversation, as little-endian int32, in order: chat_template_bench.py
  // hashes transformers' ids the same way.
  Sha256 h;
  std::int64_t tokens = 0, trained = 0;
  for (const auto& s : result.value.samples) {
    for (std::int32_t id : s.ids) {
      const unsigned char b[4] = {static_cast<unsigned char>(id & 0xff), static_cast<unsigned char>((id >> 8) & 0xff),
                                  static_cast<unsigned char>((id >> 16) & 0xff),
                                  static_cast<unsigned char>((id >> 24) & 0xff)};
      h.update(std::string_view(reinterpret_cast<const char*>(b), 4));
    }
    tokens += static_cast<std::int64_t>(s.ids.size());
    for (std::int32_t l : s.labels) trained += l != data::kIgnoreIndex ? 1 : 0;
  }
  const auto n = static_cast<std::int64_t>(result.value.samples.size());
  nlohmann::ordered_json rec;
  rec["impl"] = "odyssey";
  rec["bench"] = "chat_template";
  rec["data"] = data_file;
  rec["template"] = std::string(tmpl.value.name());
  rec["template_file"] = template_file;
  rec["threads"] = threads;
  rec["conversations"] = n;
  rec["tokens"] = tokens;
  rec["trained_tokens"] = trained;
  rec["read_s"] = load_s;
  rec["render_tokenize_s"] = tokenize_s;
  rec["conversations_per_s"] = tokenize_s > 0 ? static_cast<double>(n) / tokenize_s : 0.0;
  rec["ids_sha256"] = Sha256::hex(h.digest());
  add_provenance(rec, machine_provenance(c10::Device(c10::kCPU)));
  const std::string line = rec.dump();
  std::printf("%s\n", line.c_str());
  if (!out.empty()) {
    std::FILE* f = std::fopen(out.c_str(), "a");
    if (f) {
      std::fprintf(f, "%s\n", line.c_str());
      std::fclose(f);
    }
  }
  return 0;
}

}  // namespace odyssey::bench
