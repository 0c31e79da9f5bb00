#include "infer_args.h"

#include <iostream>
#include <type_traits>

#include "common/text.h"

namespace odyssey::cli {

std::vector<OptionSpec> inference_options() {
  return {{"model", true, false, "M", "model directory or cached hub id"},
          {"adapter", true, false, "DIR", "a PEFT LoRA adapter to apply (unmerged)"},
          {"device", true, false, "DEVICE", "auto (default), cpu or cuda"},
          {"dtype", true, false, "DTYPE", "auto (default: bfloat16 on CUDA, float32 on the CPU), float32 or bfloat16"},
          {"template", true, false, "NAME", "chat template: auto (default), chatml, qwen2_5, qwen3, llama3, llama3_1"},
          {"template-file", true, false, "F", "a Jinja chat template to use in place of the model's"},
          {"quant", true, false, "TYPE", "nf4 or fp4: quantize the base to 4 bits on load (bitsandbytes' layout)"},
          {"enable-thinking", true, false, "BOOL", "templates that read enable_thinking (Qwen3): true or false"},
          {"max-new-tokens", true, false, "N", "new tokens at most per prompt (default 256)"},
          {"temperature", true, false, "T", "0 (default): greedy; > 0: sample at this temperature"},
          {"top-k", true, false, "K", "sample among the K most likely tokens (0: off)"},
          {"top-p", true, false, "P", "sample within the smallest set of probability P (1: off)"},
          {"min-p", true, false, "P", "drop tokens less likely than P x the most likely (0: off)"},
          {"repetition-penalty", true, false, "R", "penalize tokens already seen (1: off)"},
          {"seed", true, false, "N", "sampling seed (default 0)"},
          {"stop", true, true, "TEXT", "stop at this text (repeatable); the text is cut before it"},
          {"ignore-eos", false, false, "", "do not stop at the model's end-of-sequence tokens"}};
}

#ifdef ODYSSEY_HAVE_TORCH
infer::SessionOptions session_options(const Args& a) {
  infer::SessionOptions s;
  s.model = a.value("model");
  s.adapter = a.value("adapter");
  s.device = a.value("device", "auto");
  s.dtype = a.value("dtype", "auto");
  s.template_name = a.value("template", "auto");
  s.template_file = a.value("template-file");
  s.quant = a.value("quant");
  return s;
}

bool apply_sampling_flags(const Args& a, const std::string& command, model::GenerationOptions* o) {
  bool ok = true;
  auto bad = [&](const std::string& flag, const std::string& v, const char* expected) {
    std::cerr << "odyssey-train " << command << ": --" << flag << ": found " << text::quoted(v) << ", expected "
              << expected << '\n';
    ok = false;
  };
  auto real = [&](const char* flag, double* dst) {
    if (!a.has(flag)) return;
    const auto v = text::parse_double(a.value(flag));
    if (!v) return bad(flag, a.value(flag), "a number");
    *dst = *v;
  };
  auto whole = [&](const char* flag, auto* dst) {
    if (!a.has(flag)) return;
    const auto v = text::parse_int(a.value(flag));
    if (!v || *v < 0) return bad(flag, a.value(flag), "a whole number");
    *dst = static_cast<std::remove_reference_t<decltype(*dst)>>(*v);
  };
  whole("max-new-tokens", &o->max_new_tokens);
  real("temperature", &o->sampling.temperature);
  whole("top-k", &o->sampling.top_k);
  real("top-p", &o->sampling.top_p);
  real("min-p", &o->sampling.min_p);
  real("repetition-penalty", &o->sampling.repetition_penalty);
  whole("seed", &o->sampling.seed);
  if (a.has("stop")) o->stop = a.values("stop");
  if (a.has("ignore-eos")) o->ignore_eos = true;
  if (!ok) return false;
  for (const auto& d : model::check_generation_options(*o)) {
    std::cerr << "odyssey-train " << command << ": --" <<
        [&] {
          std::string k = d.key;
          for (char& c : k)
            if (c == '_') c = '-';
          return k;
        }() << ": "
              << d.message << '\n';
    ok = false;
  }
  return ok;
}

bool thinking_flag(const Args& a, const std::string& command, std::optional<bool>* out) {
  if (!a.has("enable-thinking")) return true;
  const std::string v = a.value("enable-thinking");
  if (v != "true" && v != "false") {
    std::cerr << "odyssey-train " << command << ": --enable-thinking: found " << text::quoted(v)
              << ", expected true or false\n";
    return false;
  }
  *out = v == "true";
  return true;
}
void append_result(nlohmann::ordered_json& j, const model::GenerationResult& g) {
  j["text"] = g.text;
  j["ids"] = g.ids;
  j["finish_reason"] = g.finish_reason;
  if (!g.stop_string.empty()) j["stop"] = g.stop_string;
  j["prompt_tokens"] = g.prompt_tokens;
  j["new_tokens"] = g.ids.size();
  j["tokens_per_s"] = g.seconds > 0 ? static_cast<double>(g.ids.size()) / g.seconds : 0.0;
  j["time_to_first_token_s"] = g.first_token_seconds;
  j["seconds"] = g.seconds;
}
#endif

}  // namespace odyssey::cli
