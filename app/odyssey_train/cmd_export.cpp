// `export --merge`: a LoRA checkpoint merged into its base model, written as a Hugging Face
// model directory (safetensors shards of at most 5 GB, config.json, tokenizer files) that
// transformers and vLLM load without PEFT.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "common/text.h"
#include "config/model_config.h"
#ifdef ODYSSEY_HAVE_TORCH
#include "model/weights.h"
#include "train/checkpoint_io.h"
#include "train/lora.h"
#endif

namespace odyssey::cli {

CommandSpec export_spec() {
  return {"export",
          "export CHECKPOINT --merge --output DIR [--base MODEL] [--dtype auto|float32|bfloat16|float16]\n"
          "       [--quantize nf4|fp4 [--no-double-quant]]",
          "Merge a LoRA checkpoint into its base model and write an HF model directory.",
          "CHECKPOINT is a directory with adapter_config.json and adapter_model.safetensors (an\n"
          "Odyssey checkpoint or any PEFT LoRA adapter). The base model is --base, else the\n"
          "adapter's base_model_name_or_path. W' = W + (alpha / r) B A is computed in float32 and\n"
          "stored in --dtype (auto: the base model's torch_dtype). A 4-bit (bitsandbytes) base is\n"
          "dequantized first. With --quantize the merged decoder projections are written as a\n"
          "bitsandbytes 4-bit checkpoint transformers loads (docs/qlora.md), else 16-bit. DIR must\n"
          "not exist; it is written under a temporary name and renamed when complete. Standard output\n"
          "shows the stages as \"progress K/4: ...\" lines, then one summary line.\n\n"
          "Exit codes: 0 written, 1 a file could not be read or written (the message names it),\n"
          "2 bad arguments.",
          {{"merge", false, false, "", "merge the adapter into the base weights (required)"},
           {"output", true, false, "DIR", "the HF model directory to write"},
           {"base", true, false, "MODEL", "base model directory or hub id"},
           {"dtype", true, false, "DTYPE", "auto (default), float32, bfloat16 or float16"},
           {"quantize", true, false, "TYPE", "nf4 or fp4: write the merged model in bitsandbytes' 4-bit format"},
           {"no-double-quant", false, false, "", "with --quantize: keep the per-block absmax in fp32"}},
          1,
          1};
}

#ifndef ODYSSEY_HAVE_TORCH
int cmd_export(const Args&) {
  std::cerr << "odyssey-train export: this build has no LibTorch (configure with Torch to export)\n";
  return kFailure;
}
#else
int cmd_export(const Args& a) {
  namespace fs = std::filesystem;
  if (!a.has("merge") || !a.has("output")) {
    std::cerr << "odyssey-train export: --merge and --output DIR are required (export writes a merged model)\n";
    return kUsage;
  }
  const std::string ckpt = a.positional.at(0), out = a.value("output"), dt = a.value("dtype", "auto");
  if (dt != "auto" && dt != "float32" && dt != "bfloat16" && dt != "float16") {
    std::cerr << "odyssey-train export: --dtype: found " << text::quoted(dt)
              << ", expected auto, float32, bfloat16 or float16\n";
    return kUsage;
  }
  const std::string quantize = a.value("quantize");
  if (!quantize.empty() && quantize != "nf4" && quantize != "fp4") {
    std::cerr << "odyssey-train export: --quantize: found " << text::quoted(quantize) << ", expected nf4 or fp4\n";
    return kUsage;
  }
  if (quantize.empty() && a.has("no-double-quant")) {
    std::cerr << "odyssey-train export: --no-double-quant goes with --quantize nf4|fp4\n";
    return kUsage;
  }
  if (fs::exists(out)) {
    std::cerr << "odyssey-train export: --output " << out << ": already exists; choose a new directory\n";
    return kFailure;
  }
  auto settings = train::read_adapter_config(ckpt);
  if (!settings.ok()) {
    print_diagnostics(settings.diagnostics);
    return kFailure;
  }
  std::string base = a.value("base");
  if (base.empty()) {
    // The adapter names its base; Odyssey writes an absolute directory there.
    std::ifstream in(fs::path(ckpt) / "adapter_config.json");
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
      base = j["base_model_name_or_path"].get<std::string>();
  }
  const ModelLocation loc = locate_model(base, "");
  if (base.empty() || (loc.source != ModelLocation::Directory && loc.source != ModelLocation::HuggingFaceCache &&
                       loc.source != ModelLocation::ModelScopeCache)) {
    std::cerr << "odyssey-train export: base model " << text::quoted(base) << ": "
              << (base.empty() ? std::string("not named by the adapter") : loc.describe())
              << "; give --base DIR (a model directory with weights)\n";
    return kFailure;
  }
  // Progress for the window's Export page: "progress K/4: what" lines on standard output.
  auto progress = [](int k, const std::string& what) {
    std::cout << "progress " << k << "/4: " << what << '\n' << std::flush;
  };
  try {
    progress(1, "loading the base model " + loc.path);
    auto cfg = load_located_model_config(loc);
    model::DecoderOptions o;
    const std::string want = dt == "auto" ? cfg.value.torch_dtype : dt;
    o.dtype = want == "bfloat16" ? torch::kBFloat16 : want == "float16" ? torch::kFloat16 : torch::kFloat32;
    auto m = model::load_causal_lm(loc.path, o);
    print_diagnostics(m.diagnostics);
    if (!m.ok()) return kFailure;
    model::CausalLM lm = m.value.lm;
    progress(2, "merging the adapter " + ckpt);
    train::apply_lora(lm, settings.value);
    auto d = train::load_adapter_weights(lm, ckpt);
    print_diagnostics(d);
    if (has_errors(d)) return kFailure;
    train::merge_lora(lm);
    progress(3, "writing " + out);
    const fs::path tmp =
        fs::path(out).parent_path() / (fs::path(out).filename().string() + ".tmp-" + std::to_string(::getpid()));
    std::error_code ec;
    fs::create_directories(tmp, ec);
    if (ec) {
      std::cerr << "odyssey-train export: " << tmp.string() << ": cannot be created: " << ec.message() << '\n';
      return kFailure;
    }
    QuantSettings q;
    if (!quantize.empty()) {
      q.bits = 4;
      q.type = quantize;
      q.double_quant = !a.has("no-double-quant");
    }
    auto saved = quantize.empty() ? model::save_weights(lm, tmp.string(), 5'000'000'000, false)
                                  : model::save_weights_4bit(lm, tmp.string(), q);
    if (!saved.ok()) {
      print_diagnostics(saved.diagnostics);
      fs::remove_all(tmp, ec);
      return kFailure;
    }
    for (const auto& f : train::model_side_files()) {
      if (!quantize.empty() && f == "config.json") continue;  // save_weights_4bit wrote it
      const fs::path src = fs::path(loc.path) / f;
      if (fs::exists(src)) fs::copy_file(src, tmp / f, ec);
      if (ec) {
        std::cerr << "odyssey-train export: " << (tmp / f).string() << ": cannot be written: " << ec.message() << '\n';
        fs::remove_all(tmp, ec);
        return kFailure;
      }
    }
    // A 4-bit (bitsandbytes) base is written dequantized: its config.json loses the
    // quantization_config, or transformers would read the 16-bit tensors as 4-bit ones.
    if (const fs::path cj = tmp / "config.json"; quantize.empty() && fs::exists(cj)) {
      std::ifstream cin_(cj);
      nlohmann::json j = nlohmann::json::parse(cin_, nullptr, false);
      cin_.close();
      if (j.is_object() && j.contains("quantization_config")) {
        j.erase("quantization_config");
        std::ofstream cout_(cj, std::ios::trunc);
        cout_ << j.dump(2) << '\n';
        if (!cout_) {
          std::cerr << "odyssey-train export: " << cj.string() << ": cannot be written\n";
          fs::remove_all(tmp, ec);
          return kFailure;
        }
      }
    }
    fs::rename(tmp, out, ec);
    if (ec) {
      std::cerr << "odyssey-train export: " << out << ": " << ec.message() << '\n';
      return kFailure;
    }
    progress(4, "done");
    std::cout << "merged " << ckpt << " (r " << settings.value.rank << ", alpha " << settings.value.alpha << ") into "
              << loc.path << " -> " << out << " (" << saved.value.size() << " weight file"
              << (saved.value.size() == 1 ? "" : "s") << ")\n";
    return kOk;
  } catch (const std::exception& e) {
    std::cerr << "odyssey-train export: error: " << e.what() << '\n';
    return kFailure;
  }
}
#endif

}  // namespace odyssey::cli
