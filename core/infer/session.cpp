#include "infer/session.h"

#include <filesystem>

#include "common/text.h"
#include "config/model_config.h"
#include "data/tokenize.h"
#include "model/weights.h"
#include "train/lora.h"

namespace odyssey::infer {

namespace {}  // namespace

Result<std::unique_ptr<Session>> Session::open(const SessionOptions& o) {
  Result<std::unique_ptr<Session>> r;
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    r.diagnostics.push_back(error_at({}, "device", "found " + text::quoted(o.device) + ", expected auto, cpu or cuda"));
  if (o.dtype != "auto" && o.dtype != "float32" && o.dtype != "bfloat16")
    r.diagnostics.push_back(
        error_at({}, "dtype", "found " + text::quoted(o.dtype) + ", expected auto, float32 or bfloat16"));
  if (!o.quant.empty() && o.quant != "nf4" && o.quant != "fp4")
    r.diagnostics.push_back(error_at({}, "quant", "found " + text::quoted(o.quant) + ", expected nf4 or fp4"));
  if (!r.ok()) return r;
  const ModelLocation loc = locate_model(o.model, "");
  if (loc.source == ModelLocation::NotFound || loc.source == ModelLocation::BundledShape) {
    r.diagnostics.push_back(error_at({}, "model",
                                     text::quoted(o.model) + ": " + loc.describe() +
                                         "; give a directory with config.json, safetensors weights and "
                                         "tokenizer.json, or a hub id in the Hugging Face or ModelScope cache"));
    return r;
  }
  std::unique_ptr<Session> s(new Session());
  s->model_path_ = loc.path;
  auto tok = Tokenizer::load(loc.path);
  r.diagnostics.insert(r.diagnostics.end(), tok.diagnostics.begin(), tok.diagnostics.end());
  if (!tok.ok()) return r;
  s->tok_ = std::move(tok.value);

  const bool cuda = o.device == "cuda" || (o.device == "auto" && torch::cuda::is_available());
  if (cuda && !torch::cuda::is_available()) {
    r.diagnostics.push_back(error_at({}, "device", "cuda was asked for and no CUDA device is visible"));
    return r;
  }
  model::DecoderOptions opts;
  opts.device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  opts.dtype = o.dtype == "float32"    ? torch::kFloat32
               : o.dtype == "bfloat16" ? torch::kBFloat16
                                       : (cuda ? torch::kBFloat16 : torch::kFloat32);
  opts.fused_kernels = cuda;  // the fused ops on the GPU; the reference formulas on the CPU
  if (!o.quant.empty()) {
    opts.quant.bits = 4;
    opts.quant.type = o.quant;
  }
  auto m = model::load_causal_lm(loc.path, opts);
  r.diagnostics.insert(r.diagnostics.end(), m.diagnostics.begin(), m.diagnostics.end());
  if (!m.ok()) return r;
  s->lm_ = m.value.lm;
  s->lm_->eval();
  // q/k/v and gate/up as one product each in every step (the base never trains here).
  s->lm_->pack_projections();
  const HfModelConfig& hf = m.value.config.hf;
  // Dynamic NTK scaling is meant to run past max_position_embeddings; other kinds stop there.
  s->max_positions_ = m.value.config.rope.type == "dynamic" ? 0 : hf.max_position_embeddings;

  auto eos = model::generation_eos_ids(loc.path, &s->tok_);
  r.diagnostics.insert(r.diagnostics.end(), eos.diagnostics.begin(), eos.diagnostics.end());
  if (!eos.ok()) return r;
  s->eos_ids_ = eos.value;

  auto tmpl =
      data::template_for(o.template_name, s->tok_, hf.family,
                         o.template_file.empty() ? std::string() : std::filesystem::absolute(o.template_file).string());
  if (tmpl.ok()) {
    s->template_ = std::move(tmpl.value);
    for (const auto& d : tmpl.diagnostics)
      if (d.severity != Severity::Error) r.diagnostics.push_back(d);
  } else {
    // Raw prompts still work; a conversation gets this as its error.
    s->template_error_ = format_all(tmpl.diagnostics);
  }
  if (!o.adapter.empty()) {
    Diagnostics d = s->set_adapter(o.adapter);
    r.diagnostics.insert(r.diagnostics.end(), d.begin(), d.end());
    if (has_errors(d)) return r;
  }
  r.value = std::move(s);
  return r;
}

Result<std::vector<std::int32_t>> Session::encode(const Prompt& p, std::optional<bool> enable_thinking) const {
  Result<std::vector<std::int32_t>> r;
  if (!p.ids.empty()) {
    r.value = p.ids;
    return r;
  }
  if (p.text) {
    auto ids = tok_.encode(*p.text, /*add_special_tokens=*/true);
    r.diagnostics = ids.diagnostics;
    r.value = std::move(ids.value);
    return r;
  }
  if (!template_) {
    r.diagnostics.push_back(error_at({}, "messages",
                                     "the model " + model_path_ +
                                         " has no chat template Odyssey can use, so a conversation cannot be "
                                         "rendered (give a raw \"prompt\", or a template with --template or "
                                         "--template-file): " +
                                         template_error_));
    return r;
  }
  if (p.messages.empty()) {
    r.diagnostics.push_back(error_at({}, "messages", "is empty: a conversation needs at least one message"));
    return r;
  }
  ChatOptions opts;
  opts.add_generation_prompt = true;
  opts.enable_thinking = enable_thinking;
  opts.tools = p.tools;
  auto enc = template_->encode(tok_, p.messages, opts);
  r.diagnostics = enc.diagnostics;
  r.value = std::move(enc.value.ids);
  return r;
}

Diagnostics Session::set_adapter(const std::string& dir) {
  if (dir == adapter_) return {};
  adapter_.clear();
  if (dir.empty()) {
    train::remove_lora(lm_);
    return {};
  }
  Diagnostics d = train::attach_adapter(lm_, dir);
  if (!has_errors(d)) adapter_ = dir;
  return d;
}

model::GenerationOptions Session::defaults() const {
  model::GenerationOptions o;
  o.eos_ids = eos_ids_;
  o.max_positions = max_positions_;
  return o;
}

std::string Session::device() const { return lm_->options().device.is_cuda() ? "cuda" : "cpu"; }

std::string Session::dtype() const { return lm_->options().dtype == torch::kBFloat16 ? "bfloat16" : "float32"; }

}  // namespace odyssey::infer
