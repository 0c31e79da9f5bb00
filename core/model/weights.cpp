#include "model/weights.h"

#include <filesystem>
#include <map>
#include <sstream>
#include <utility>

#include "common/text.h"
#include "model/weights_check.h"

namespace odyssey::model {

namespace fs = std::filesystem;

namespace {

// Lists longer than this are cut with "... and N more" (a wrong model gives hundreds).
constexpr std::size_t kMaxListed = 24;

std::string shape_text(c10::IntArrayRef s) {
  std::ostringstream o;
  o << '[';
  for (std::size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

Diagnostic derr(std::string file, std::string key, std::string msg) {
  Diagnostic d;
  d.file = std::move(file);
  d.key = std::move(key);
  d.message = std::move(msg);
  return d;
}

std::string describe(const DecoderConfig& c) {
  return c.hf.architecture + " with " + std::to_string(c.hf.num_hidden_layers) + " layers as " + c.file +
         " describes it";
}

}  // namespace

Diagnostics load_weights(CausalLM& lm, const SafetensorsCheckpoint& ckpt, const std::string& where) {
  Diagnostics errs;
  const DecoderConfig& cfg = lm->config();
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : lm->named_parameters(true)) params.emplace(p.key(), p.value());
  const bool tied = cfg.hf.tie_word_embeddings;
  std::size_t extra = 0, missing = 0, bad = 0;

  for (const std::string& name : ckpt.names()) {
    const SafetensorsTensorInfo* info = ckpt.info(name);
    const std::string file = ckpt.file_of(name);
    const c10::IntArrayRef file_shape(info->shape);
    auto it = params.find(name);
    if (it == params.end()) {
      if (name.ends_with("rotary_emb.inv_freq")) continue;
      if (tied && name == "lm_head.weight") {
        const torch::Tensor& emb = lm->model->embed_tokens->weight;
        if (file_shape != emb.sizes())
          errs.push_back(derr(file, name, "shape " + shape_text(file_shape) + " in the file; the tied embedding is " +
                                              shape_text(emb.sizes())));
        continue;
      }
      if (extra++ < kMaxListed)
        errs.push_back(derr(file, name, "unexpected tensor: not a parameter of " + describe(cfg)));
      continue;
    }
    if (file_shape != it->second.sizes()) {
      if (bad++ < kMaxListed)
        errs.push_back(derr(file, name, "shape " + shape_text(file_shape) + " in the file, config.json (" + cfg.file +
                                            ") gives " + shape_text(it->second.sizes())));
    } else if (!to_torch_dtype(info->dtype)) {
      if (bad++ < kMaxListed)
        errs.push_back(derr(file, name, std::string("dtype ") + dtype_name(info->dtype) + "; Odyssey loads " +
                                            supported_dtypes_text() + " weights"));
    }
  }
  for (const auto& [name, t] : params) {
    if (ckpt.info(name)) continue;
    if (missing++ < kMaxListed)
      errs.push_back(derr(where, name, "missing: " + describe(cfg) + " needs it with shape " + shape_text(t.sizes())));
  }
  for (auto [n, what] : {std::pair{extra, "unexpected"}, std::pair{missing, "missing"}, std::pair{bad, "mismatched"}})
    if (n > kMaxListed)
      errs.push_back(derr(where, "", "... and " + std::to_string(n - kMaxListed) + " more " + what + " tensors"));
  if (has_errors(errs)) return errs;

  torch::NoGradGuard no_grad;
  for (auto& [name, t] : params) {
    Result<torch::Tensor> r = ckpt.load(name, t.scalar_type(), t.device());
    if (!r.ok()) {
      errs.insert(errs.end(), r.diagnostics.begin(), r.diagnostics.end());
      continue;
    }
    t.copy_(r.value);
  }
  return errs;
}

Result<LoadedModel> load_causal_lm(const std::string& model_dir, const DecoderOptions& options) {
  Result<LoadedModel> r;
  Result<DecoderConfig> cfg = load_decoder_config(model_dir);
  r.diagnostics = cfg.diagnostics;
  if (!cfg.ok()) return r;
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(model_dir);
  r.diagnostics.insert(r.diagnostics.end(), ckpt.diagnostics.begin(), ckpt.diagnostics.end());
  if (!ckpt.ok()) return r;
  // config.json against the headers' shapes before the model is built (and allocated).
  std::vector<std::pair<std::string, const SafetensorsHeader*>> headers;
  for (const auto& f : ckpt.value.files()) headers.emplace_back(f->path(), &f->header());
  const Diagnostics shape = check_config_against_weights(cfg.value.hf, cfg.value.file, headers);
  r.diagnostics.insert(r.diagnostics.end(), shape.begin(), shape.end());
  if (has_errors(shape)) return r;
  r.value.config = cfg.value;
  r.value.lm = CausalLM(cfg.value, options);
  std::error_code ec;
  const fs::path dir(model_dir);
  const fs::path index = dir / "model.safetensors.index.json";
  const std::string where = fs::is_directory(dir, ec)
                                ? (fs::exists(index, ec) ? index : dir / "model.safetensors").string()
                                : model_dir;
  Diagnostics d = load_weights(r.value.lm, ckpt.value, where);
  r.diagnostics.insert(r.diagnostics.end(), d.begin(), d.end());
  if (has_errors(d)) r.value.lm = CausalLM(nullptr);
  return r;
}

Result<std::vector<std::string>> save_weights(CausalLM& lm, const std::string& dir, std::uint64_t max_shard_bytes,
                                              bool copy_config) {
  NamedTensors tensors;
  for (const auto& p : lm->named_parameters(true)) tensors.emplace_back(p.key(), p.value().detach());
  Result<std::vector<std::string>> r = save_sharded(dir, tensors, max_shard_bytes);
  if (!r.ok() || !copy_config) return r;
  std::error_code ec;
  const fs::path src(lm->config().file), dst = fs::path(dir) / "config.json";
  if (!src.empty() && !fs::equivalent(src, dst, ec)) {
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    if (ec) r.diagnostics.push_back(derr(dst.string(), "", "cannot copy config.json from " + src.string() + ": " + ec.message()));
  }
  return r;
}

}  // namespace odyssey::model
