#include "model/decoder_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/json_dump.h"
#include "common/regular_file.h"
#include "common/text.h"

namespace odyssey {

namespace {

using nlohmann::json;

// A number under `key` of `obj`; a diagnostic when present but not a number.
bool read_number(const json& obj, const char* key, const std::string& where, const std::string& file, double* out,
                 Diagnostics* diags) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return false;
  if (!it->is_number()) {
    diags->push_back(error_at(file, where + key, "found " + text::excerpt(dump_json(*it)) + ", expected a number"));
    return false;
  }
  *out = it->get<double>();
  return true;
}

// One RoPE object (`p`, null: none beyond the top level) into r, its kind's parameters read as
// transformers 5.17's standardize_rope_params and _compute_*_parameters read them. `key`
// names the object in messages ("rope_parameters.", "rope_scaling.", ...).
void parse_rope_object(const json& j, const json* p, const std::string& where, const DecoderConfig& c, RopeParams* r,
                       Diagnostics* diags) {
  const std::string& file = c.file;
  r->max_position_embeddings = c.hf.max_position_embeddings;
  if (!p) return;
  read_number(*p, "rope_theta", where, file, &r->theta, diags);
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = p->find(key);
    if (it != p->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  const bool phi3 = c.hf.family_row().fused_projections;  // Phi3Config: "yarn" means longrope
  if (type == "su" || (type == "yarn" && phi3)) type = "longrope";
  if (auto it = p->find("partial_rotary_factor");
      !c.hf.family_row().partial_rotary && it != p->end() && it->is_number() && it->get<double>() != 1.0) {
    std::vector<std::string> partial;
    for (const ModelFamily& f : model_families())
      if (f.partial_rotary) partial.emplace_back(f.architecture);
    diags->push_back(error_at(file, where + "partial_rotary_factor",
                              "found " + text::excerpt(dump_json(*it)) + "; Odyssey rotates part of the head for " +
                                  text::join(partial, " and ") + " only"));
  }
  if (type == "default") return;
  const std::string kinds = supported_rope_types();
  if (type != "linear" && type != "dynamic" && type != "yarn" && type != "longrope" && type != "llama3") {
    diags->push_back(
        error_at(file, where + "rope_type", "found " + text::quoted(type) + "; Odyssey implements " + kinds));
    return;
  }
  r->type = type;
  auto need = [&](const char* key, double* out) {
    if (!read_number(*p, key, where, file, out, diags))
      diags->push_back(error_at(file, where + key, "missing; rope_type " + type + " needs it"));
  };
  // As standardize_rope_params: a top-level original_max_position_embeddings wins (Phi-3),
  // else the one in the RoPE object, else max_position_embeddings.
  double omax = static_cast<double>(c.hf.max_position_embeddings);
  read_number(*p, "original_max_position_embeddings", where, file, &omax, diags);
  read_number(j, "original_max_position_embeddings", "", file, &omax, diags);
  r->original_max_position_embeddings = static_cast<std::int64_t>(omax);
  const bool needs_omax = type == "llama3" || type == "yarn" || type == "longrope";
  if (needs_omax && r->original_max_position_embeddings <= 0)
    diags->push_back(error_at(file, where + "original_max_position_embeddings",
                              "missing or not positive; rope_type " + type + " needs it"));
  if (type == "linear" || type == "dynamic" || type == "llama3") need("factor", &r->factor);
  if (type == "dynamic" && r->max_position_embeddings <= 0)
    diags->push_back(error_at(file, "max_position_embeddings", "missing; rope_type dynamic scales past it"));
  if (type == "llama3") {
    need("low_freq_factor", &r->low_freq_factor);
    need("high_freq_factor", &r->high_freq_factor);
    if (r->high_freq_factor <= r->low_freq_factor)
      diags->push_back(
          error_at(file, where + "high_freq_factor",
                   "must be greater than low_freq_factor (" + text::format_double(r->low_freq_factor) + ")"));
  }
  const double mpe = static_cast<double>(c.hf.max_position_embeddings);
  if (type == "yarn" || type == "longrope") {
    // factor absent: max_position_embeddings / original (both _compute_yarn/_longrope_parameters).
    if (!read_number(*p, "factor", where, file, &r->factor, diags)) {
      if (r->original_max_position_embeddings <= 0 || mpe <= 0)
        diags->push_back(error_at(file, where + "factor", "missing, and max_position_embeddings does not give it"));
      else r->factor = mpe / static_cast<double>(r->original_max_position_embeddings);
    }
    double af = 0;
    const bool has_af = read_number(*p, "attention_factor", where, file, &af, diags);
    if (type == "yarn") {
      double bf = 0, bs = 0, ms = 0, msa = 0;
      if (read_number(*p, "beta_fast", where, file, &bf, diags) && bf != 0) r->beta_fast = bf;  // `or 32`
      if (read_number(*p, "beta_slow", where, file, &bs, diags) && bs != 0) r->beta_slow = bs;  // `or 1`
      if (auto it = p->find("truncate"); it != p->end() && it->is_boolean()) r->truncate = it->get<bool>();
      read_number(*p, "mscale", where, file, &ms, diags);
      read_number(*p, "mscale_all_dim", where, file, &msa, diags);
      auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
      if (has_af) r->attention_factor = af;
      else if (ms != 0 && msa != 0) r->attention_factor = get_mscale(r->factor, ms) / get_mscale(r->factor, msa);
      else r->attention_factor = get_mscale(r->factor, 1.0);
    } else {
      if (has_af) r->attention_factor = af;
      else if (r->factor <= 1.0) r->attention_factor = 1.0;
      else
        r->attention_factor =
            std::sqrt(1 + std::log(r->factor) / std::log(static_cast<double>(r->original_max_position_embeddings)));
      for (auto [key, out] : {std::pair{"short_factor", &r->short_factor}, std::pair{"long_factor", &r->long_factor}}) {
        auto it = p->find(key);
        if (it == p->end() || !it->is_array()) {
          diags->push_back(error_at(file, where + key, "missing or not a list; rope_type longrope needs it"));
          continue;
        }
        for (const auto& v : *it) {
          if (!v.is_number()) {
            diags->push_back(
                error_at(file, where + key, "found " + text::excerpt(dump_json(v)) + ", expected numbers"));
            break;
          }
          out->push_back(v.get<double>());
        }
      }
    }
  }
}

void parse_rope(const json& j, DecoderConfig* c, Diagnostics* diags) {
  const std::string& file = c->file;
  RopeParams& r = c->rope;
  const ModelFamily& f = c->hf.family_row();
  r.theta = f.rope_theta;
  read_number(j, "rope_theta", "", file, &r.theta, diags);
  // Gemma-3, OLMo-3: transformers 5 writes {"full_attention": {...}, "sliding_attention": {...}};
  // 4.x checkpoints have rope_theta / rope_scaling for the full layers and (Gemma-3)
  // rope_local_base_freq.
  if (f.local_rope) {
    RopeParams local;
    local.theta = f.local_rope_theta;  // OLMo-3: the class default, not config.json's rope_theta
    if (!f.local_rope_theta_key.empty())
      read_number(j, std::string(f.local_rope_theta_key).c_str(), "", file, &local.theta, diags);
    auto rp = j.find("rope_parameters");
    if (rp != j.end() && rp->is_object() && (rp->contains("full_attention") || rp->contains("sliding_attention"))) {
      for (const char* lt : {"full_attention", "sliding_attention"}) {
        auto it = rp->find(lt);
        if (it == rp->end() || it->is_null()) continue;
        if (!it->is_object()) {
          diags->push_back(error_at(file, std::string("rope_parameters.") + lt, "expected an object"));
          continue;
        }
        parse_rope_object(j, &*it, std::string("rope_parameters.") + lt + ".", *c,
                          std::string(lt) == "full_attention" ? &r : &local, diags);
      }
      c->rope_local = local;
      return;
    }
    // 4.x form: the local base alone; rope_scaling (below) applies to the full layers.
    local.max_position_embeddings = c->hf.max_position_embeddings;
    c->rope_local = local;
  }
  // transformers 5 writes rope_parameters; 4.x wrote rope_scaling beside a top-level rope_theta.
  const json* p = nullptr;
  std::string where;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_object()) {
      p = &*it;
      where = std::string(key) + ".";
      break;
    }
    if (it != j.end() && !it->is_null()) {
      diags->push_back(error_at(file, key, "found " + text::excerpt(dump_json(*it)) + ", expected an object"));
      return;
    }
  }
  parse_rope_object(j, p, where, *c, &r, diags);
}

}  // namespace

const char* supported_rope_types() {
  return "\"default\", \"linear\", \"dynamic\", \"yarn\", \"longrope\" (\"su\") and \"llama3\" (config.json's "
         "rope_parameters / rope_scaling rope_type or type)";
}

Result<DecoderConfig> parse_decoder_config(const std::string& json_text, const std::string& file) {
  Result<DecoderConfig> r;
  Result<HfModelConfig> hf = parse_model_config(json_text, file);
  r.diagnostics = hf.diagnostics;
  if (!hf.ok()) return r;
  DecoderConfig& c = r.value;
  c.hf = hf.value;
  c.file = file;
  // A multimodal wrapper (Gemma-3 4B/12B/27B): its text model's settings (text_config).
  const std::string text = text_model_config_json(json_text);
  const json j = json::parse(text);  // parse_model_config has checked it parses

  if (auto it = j.find("pad_token_id"); it != j.end() && it->is_number_integer()) {
    const auto v = it->get<std::int64_t>();
    if (v >= 0 && v < c.hf.vocab_size) c.pad_token_id = v;
  }
  double init = c.initializer_range;
  if (auto it = j.find("initializer_range"); it != j.end() && it->is_number()) init = it->get<double>();
  c.initializer_range = init;
  parse_rope(j, &c, &r.diagnostics);
  const std::int64_t rotary =
      static_cast<std::int64_t>(static_cast<double>(c.hf.head_dim) * c.hf.partial_rotary_factor);
  for (RopeParams* rp : {&c.rope, c.rope_local ? &*c.rope_local : nullptr}) {
    if (!rp) continue;
    rp->partial_rotary_factor = c.hf.partial_rotary_factor;
    if (rp->type == "longrope")
      for (const auto* f : {&rp->short_factor, &rp->long_factor})
        if (!f->empty() && static_cast<std::int64_t>(f->size()) != rotary / 2)
          r.diagnostics.push_back(error_at(
              file, f == &rp->short_factor ? "rope_scaling.short_factor" : "rope_scaling.long_factor",
              std::to_string(f->size()) +
                  " values; head_dim x partial_rotary_factor / 2 = " + std::to_string(rotary / 2) + " needed"));
  }
  if (rotary % 2 != 0 || rotary <= 0)
    r.diagnostics.push_back(
        error_at(file, "partial_rotary_factor",
                 "head_dim x partial_rotary_factor = " + std::to_string(rotary) + " must be a positive even number"));
  Result<QuantSettings> q = parse_quantization_config(text, file);
  r.diagnostics.insert(r.diagnostics.end(), q.diagnostics.begin(), q.diagnostics.end());
  if (q.ok()) c.quant = q.value;
  return r;
}

Result<DecoderConfig> load_decoder_config(const std::string& model_dir) {
  const std::filesystem::path p = std::filesystem::path(model_dir) / "config.json";
  std::string text, why;
  if (!read_regular_file(p.string(), std::uint64_t{64} << 20, &text, &why)) {  // never blocks on a FIFO
    Result<DecoderConfig> r;
    r.diagnostics.push_back(
        error_at(p.string(), "", "cannot be read (" + why + "); a Hugging Face model directory holds config.json"));
    return r;
  }
  return parse_decoder_config(text, p.string());
}

}  // namespace odyssey
