#include "model/weights.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/text.h"
#include "kernels/quant4.h"
#include "model/quant_state.h"
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

// bitsandbytes' per-weight tensors beside "<module>.weight" (Params4bit's state dict).
const char* const kQuantParts[] = {"absmax",
                                   "quant_map",
                                   "nested_absmax",
                                   "nested_quant_map",
                                   "quant_state.bitsandbytes__nf4",
                                   "quant_state.bitsandbytes__fp4"};

// Whether bitsandbytes' packed quant state (nf4 or fp4) sits beside the weight `name`.
bool has_quant_state(const SafetensorsCheckpoint& ckpt, const std::string& name) {
  return ckpt.info(name + ".quant_state.bitsandbytes__nf4") || ckpt.info(name + ".quant_state.bitsandbytes__fp4");
}

Result<torch::Tensor> load_stored(const SafetensorsCheckpoint& ckpt, const std::string& name) {
  const std::string file = ckpt.file_of(name);
  for (const auto& f : ckpt.files())
    if (f->path() == file) return f->load_as_stored(name);
  Result<torch::Tensor> r;
  r.diagnostics.push_back(error_at(ckpt.source(), name, "missing"));
  return r;
}

// A pre-quantized weight "<module>.weight" and its quant state, as bitsandbytes saves them,
// checked against the module's shape; every inconsistency names the tensor.
Result<c10::intrusive_ptr<kernels::Quant4Weight>> read_prequantized(const SafetensorsCheckpoint& ckpt,
                                                                    const std::string& module,
                                                                    const std::vector<std::int64_t>& want,
                                                                    const torch::Device& device) {
  Result<c10::intrusive_ptr<kernels::Quant4Weight>> r;
  const std::string w = module + ".weight";
  auto fail = [&](const std::string& tensor, const std::string& msg) {
    r.diagnostics.push_back(error_at(ckpt.file_of(tensor).empty() ? ckpt.source() : ckpt.file_of(tensor), tensor, msg));
  };
  std::string state_name;
  for (const char* t : {"nf4", "fp4"})
    if (ckpt.info(w + ".quant_state.bitsandbytes__" + t)) state_name = w + ".quant_state.bitsandbytes__" + t;
  if (state_name.empty()) {
    fail(w + ".quant_state.bitsandbytes__nf4", "missing: a bitsandbytes 4-bit weight needs its packed quant state");
    return r;
  }
  Result<torch::Tensor> st = load_stored(ckpt, state_name);
  if (!st.ok()) {
    r.diagnostics = st.diagnostics;
    return r;
  }
  const torch::Tensor bytes = st.value.contiguous();
  if (bytes.scalar_type() != torch::kUInt8) {
    fail(state_name, "must be U8 (the quant state's JSON bytes)");
    return r;
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data_ptr<std::uint8_t>()),
                              static_cast<std::size_t>(bytes.numel()));
  Result<QuantStateInfo> info = parse_quant_state(text, ckpt.file_of(state_name), state_name);
  if (!info.ok()) {
    r.diagnostics.insert(r.diagnostics.end(), info.diagnostics.begin(), info.diagnostics.end());
    return r;
  }
  const QuantStateInfo& qs = info.value;
  auto q = c10::make_intrusive<kernels::Quant4Weight>();
  q->type = *kernels::parse_quant4_type(qs.quant_type);
  q->blocksize = qs.blocksize;
  if (qs.shape != want) {
    fail(state_name, "shape " + shape_text(qs.shape) + "; the model's config.json gives " + shape_text(want));
    return r;
  }
  q->shape = want;
  q->dtype = qs.dtype == "float32" ? torch::kFloat32 : qs.dtype == "float16" ? torch::kHalf : torch::kBFloat16;
  const std::int64_t n = q->numel(), blocks = q->blocks();

  auto tensor = [&](const std::string& name, torch::ScalarType want_type, std::int64_t numel) -> torch::Tensor {
    Result<torch::Tensor> t = load_stored(ckpt, name);
    if (!t.ok()) {
      r.diagnostics.insert(r.diagnostics.end(), t.diagnostics.begin(), t.diagnostics.end());
      return {};
    }
    if (t.value.scalar_type() != want_type || t.value.numel() != numel) {
      fail(name, std::string("must be ") + (want_type == torch::kUInt8 ? "U8" : "F32") + " with " +
                     std::to_string(numel) + " values for a " + shape_text(want) + " weight in blocks of " +
                     std::to_string(q->blocksize) + "; the file has " + std::to_string(t.value.numel()));
      return {};
    }
    return t.value.to(device);
  };
  q->packed = tensor(w, torch::kUInt8, (n + 1) / 2);
  q->nested = qs.nested || ckpt.info(w + ".nested_absmax") != nullptr;
  q->absmax = tensor(w + ".absmax", q->nested ? torch::kUInt8 : torch::kFloat32, blocks);
  q->code = tensor(w + ".quant_map", torch::kFloat32, 16);
  if (q->code.defined() && !torch::allclose(q->code.cpu(), kernels::quant4_code(q->type), /*rtol=*/0.0, /*atol=*/1e-6))
    fail(w + ".quant_map", std::string("is not bitsandbytes' ") + kernels::quant4_type_name(q->type) + " table");
  if (q->nested) {
    if (!qs.nested) {
      fail(state_name, "has no nested_blocksize and nested_offset, but " + w + ".nested_absmax is beside it");
      return r;
    }
    q->nested_blocksize = qs.nested_blocksize;
    q->offset = static_cast<float>(qs.nested_offset);
    q->nested_absmax =
        tensor(w + ".nested_absmax", torch::kFloat32, (blocks + q->nested_blocksize - 1) / q->nested_blocksize);
    q->nested_code = tensor(w + ".nested_quant_map", torch::kFloat32, 256);
  }
  if (has_errors(r.diagnostics)) return r;
  r.value = q;
  return r;
}

}  // namespace

std::map<std::string, ExpertPiece> expert_pieces(CausalLM& lm) {
  std::map<std::string, ExpertPiece> out;
  const ModelFamily& f = lm->config().hf.family_row();
  const bool mixtral = f.moe == MoeKind::Mixtral;  // its router sits under block_sparse_moe too
  const auto& layers = lm->model->layer_list;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (!layers[l]->moe) continue;
    const std::string m = "model.layers." + std::to_string(l) + ".mlp.";
    const std::string hub = "model.layers." + std::to_string(l) + "." + std::string(f.moe_module()) + ".";
    const Experts& ex = layers[l]->moe->experts;
    const std::int64_t e_count = ex->num_experts, i = ex->intermediate, h = ex->hidden;
    if (mixtral) out.emplace(hub + "gate.weight", ExpertPiece{m + "gate.weight", -1, 0, e_count, {e_count, h}});
    for (std::int64_t e = 0; e < e_count; ++e) {
      const std::string x = hub + "experts." + std::to_string(e) + ".";
      // Mixtral's w1 is the gate, w3 the up projection, w2 the down projection.
      out.emplace(x + std::string(f.expert_gate()) + ".weight",
                  ExpertPiece{m + "experts.gate_up_proj", e, 0, i, {i, h}});
      out.emplace(x + std::string(f.expert_up()) + ".weight", ExpertPiece{m + "experts.gate_up_proj", e, i, i, {i, h}});
      out.emplace(x + std::string(f.expert_down()) + ".weight", ExpertPiece{m + "experts.down_proj", e, 0, h, {h, i}});
    }
  }
  return out;
}

namespace {

std::string describe(const DecoderConfig& c) {
  return c.hf.architecture + " with " + std::to_string(c.hf.num_hidden_layers) + " layers as " + c.file +
         " describes it";
}

}  // namespace

std::map<std::string, LinearImpl*> quantized_linears(CausalLM& lm) {
  std::map<std::string, LinearImpl*> out;
  for (const auto& item : lm->named_modules("", false))
    if (auto* l = dynamic_cast<LinearImpl*>(item.value().get()); l && l->quantized) out.emplace(item.key(), l);
  return out;
}

std::map<std::string, ExpertsImpl*> quantized_experts(CausalLM& lm) {
  std::map<std::string, ExpertsImpl*> out;
  const auto& layers = lm->model->layer_list;
  for (std::size_t l = 0; l < layers.size(); ++l)
    if (layers[l]->moe && layers[l]->moe->experts->quantized)
      out.emplace("model.layers." + std::to_string(l) + ".mlp.experts", layers[l]->moe->experts.ptr().get());
  return out;
}

std::map<std::string, c10::intrusive_ptr<kernels::Quant4Weight>> quant4_weights(CausalLM& lm) {
  std::map<std::string, c10::intrusive_ptr<kernels::Quant4Weight>> out;
  for (const auto& [m, l] : quantized_linears(lm)) out.emplace(m + ".weight", l->quant);
  for (const auto& [m, e] : quantized_experts(lm)) {
    out.emplace(m + ".gate_up_proj", e->gate_up_quant);
    out.emplace(m + ".down_proj", e->down_quant);
  }
  return out;
}

std::string first_4bit_weight(CausalLM& lm) {
  if (const auto q = quantized_linears(lm); !q.empty()) return q.begin()->first + ".weight";
  if (const auto e = quantized_experts(lm); !e.empty()) return e.begin()->first + ".gate_up_proj";
  return {};
}

Diagnostics load_weights(CausalLM& lm, const SafetensorsCheckpoint& stored, const std::string& where) {
  Diagnostics errs;
  const DecoderConfig& cfg = lm->config();
  // A multimodal wrapper's tensors under the text model's names (a model directory, or a full
  // fine-tune's checkpoint, which save_weights writes whole); the vision tower and projector
  // are not loaded.
  std::optional<SafetensorsCheckpoint> text_view;
  if (!cfg.hf.wrapper_architecture.empty()) {
    text_view = stored;
    text_view->rename([&](const std::string& name) { return text_model_name(cfg.hf, name); });
  }
  const SafetensorsCheckpoint& ckpt = text_view ? *text_view : stored;
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : lm->named_parameters(true)) params.emplace(p.key(), p.value());
  const bool tied = cfg.hf.tie_word_embeddings;
  std::size_t extra = 0, missing = 0, bad = 0;
  // 4-bit projections: "<module>.weight" is read (and quantized, unless the checkpoint is
  // already 4-bit, when bitsandbytes' quant-state tensors come beside it).
  const std::map<std::string, LinearImpl*> qlin = quantized_linears(lm);
  const bool pre = cfg.quant.prequantized;
  std::map<std::string, std::string> quant_part_of;  // "<module>.weight.absmax" -> module
  const std::map<std::string, ExpertPiece> pieces = expert_pieces(lm);
  for (const auto& [m, lin] : qlin)
    for (const char* part : kQuantParts) quant_part_of.emplace(m + ".weight." + part, m);
  // 4-bit experts: each stacked parameter ("...mlp.experts.gate_up_proj") is read whole, from the
  // stacked tensor or its per-expert tensors (those of a bitsandbytes checkpoint 4-bit with their
  // quant state), and quantized as one weight.
  std::map<std::string, std::pair<ExpertsImpl*, std::string>> qexp;
  for (const auto& [m, ex] : quantized_experts(lm))
    for (const char* which : {"gate_up_proj", "down_proj"}) qexp.emplace(m + "." + which, std::pair{ex, which});
  for (const auto& [pname, piece] : pieces)
    if (qexp.count(piece.param) && pname.ends_with(".weight"))
      for (const char* part : kQuantParts) quant_part_of.emplace(pname + "." + part, pname);
  // A pre-quantized checkpoint may hold 4-bit weights where Odyssey keeps 16-bit ones: a MoE
  // router (mlp.gate, block_sparse_moe.gate) was a Linear module in transformers 4, which
  // bitsandbytes quantized. Such a weight is read with its quant state and dequantized into
  // the parameter (bitsandbytes computes with the dequantized weight too).
  auto prequantized_param = [&](const std::string& name) {
    const SafetensorsTensorInfo* info = ckpt.info(name);
    return pre && info && info->dtype == SafetensorsDtype::U8 && name.ends_with(".weight") &&
           has_quant_state(ckpt, name);
  };
  for (const auto& [name, t] : params)
    if (prequantized_param(name))
      for (const char* part : kQuantParts) quant_part_of.emplace(name + "." + part, name);
  for (const auto& [pname, piece] : pieces)  // Mixtral's router is a renamed piece
    if (!qexp.count(piece.param) && prequantized_param(pname))
      for (const char* part : kQuantParts) quant_part_of.emplace(pname + "." + part, pname);

  for (const std::string& name : ckpt.names()) {
    const SafetensorsTensorInfo* info = ckpt.info(name);
    const std::string file = ckpt.file_of(name);
    const c10::IntArrayRef file_shape(info->shape);
    if (name.ends_with(".weight") && qlin.count(name.substr(0, name.size() - 7))) {
      const LinearImpl* lin = qlin.at(name.substr(0, name.size() - 7));
      if (pre) {
        if (info->dtype != SafetensorsDtype::U8 && bad++ < kMaxListed)
          errs.push_back(error_at(file, name,
                                  std::string("dtype ") + dtype_name(info->dtype) + "; config.json (" + cfg.file +
                                      ") declares a bitsandbytes 4-bit checkpoint, whose weights are U8"));
      } else if (file_shape != c10::IntArrayRef{lin->out_features, lin->in_features} || !to_torch_dtype(info->dtype)) {
        if (bad++ < kMaxListed)
          errs.push_back(error_at(file, name,
                                  "shape " + shape_text(file_shape) + " " + dtype_name(info->dtype) +
                                      " in the file; a 16-bit [" + std::to_string(lin->out_features) + ", " +
                                      std::to_string(lin->in_features) + "] weight is quantized on load"));
      }
      continue;
    }
    if (auto qe = qexp.find(name); qe != qexp.end()) {
      const std::vector<std::int64_t> want = qe->second.first->shape_of(qe->second.second);
      if ((file_shape != c10::IntArrayRef(want) || !to_torch_dtype(info->dtype)) && bad++ < kMaxListed)
        errs.push_back(error_at(file, name,
                                "shape " + shape_text(file_shape) + " " + dtype_name(info->dtype) +
                                    " in the file; 16-bit experts " + shape_text(want) + " are quantized on load"));
      continue;
    }
    if (quant_part_of.count(name)) {
      if (!pre && extra++ < kMaxListed)
        errs.push_back(error_at(file, name,
                                "a bitsandbytes quant-state tensor, but config.json (" + cfg.file +
                                    ") has no quantization_config with load_in_4bit"));
      continue;
    }
    auto it = params.find(name);
    if (auto pc = pieces.find(name); it == params.end() && pc != pieces.end()) {
      const ExpertPiece& piece = pc->second;
      if (ckpt.info(piece.param)) {  // both layouts of one parameter
        if (extra++ < kMaxListed)
          errs.push_back(error_at(
              file, name, "per-expert tensor beside the stacked " + piece.param + "; a checkpoint holds one layout"));
      } else if (pre && (qexp.count(piece.param) || prequantized_param(name)) && info->dtype == SafetensorsDtype::U8) {
        // bitsandbytes' packed weight: its quant state says the shape (read_prequantized checks it)
      } else if (file_shape != c10::IntArrayRef(piece.shape)) {
        if (bad++ < kMaxListed)
          errs.push_back(error_at(file, name,
                                  "shape " + shape_text(file_shape) + " in the file, config.json (" + cfg.file +
                                      ") gives " + shape_text(piece.shape)));
      } else if (!to_torch_dtype(info->dtype)) {
        if (bad++ < kMaxListed)
          errs.push_back(error_at(file, name,
                                  std::string("dtype ") + dtype_name(info->dtype) + "; Odyssey loads " +
                                      supported_dtypes_text() + " weights"));
      }
      continue;
    }
    if (it == params.end()) {
      if (name.ends_with("rotary_emb.inv_freq")) continue;
      if (tied && name == "lm_head.weight") {
        const torch::Tensor& emb = lm->model->embed_tokens->weight;
        if (file_shape != emb.sizes())
          errs.push_back(error_at(
              file, name,
              "shape " + shape_text(file_shape) + " in the file; the tied embedding is " + shape_text(emb.sizes())));
        continue;
      }
      bool quant_part = false;
      for (const char* part : kQuantParts) quant_part = quant_part || name.ends_with(std::string(".weight.") + part);
      if (extra++ < kMaxListed)
        errs.push_back(error_at(file, name,
                                quant_part && !pre ? "a bitsandbytes quant-state tensor, but config.json (" + cfg.file +
                                                         ") has no quantization_config with load_in_4bit"
                                                   : "unexpected tensor: not a parameter of " + describe(cfg)));
      continue;
    }
    if (prequantized_param(name)) continue;  // read_prequantized checks its quant state's shape
    if (file_shape != it->second.sizes()) {
      if (bad++ < kMaxListed)
        errs.push_back(error_at(file, name,
                                "shape " + shape_text(file_shape) + " in the file, config.json (" + cfg.file +
                                    ") gives " + shape_text(it->second.sizes())));
    } else if (!to_torch_dtype(info->dtype)) {
      if (bad++ < kMaxListed)
        errs.push_back(error_at(file, name,
                                std::string("dtype ") + dtype_name(info->dtype) + "; Odyssey loads " +
                                    supported_dtypes_text() + " weights"));
    }
  }
  for (const auto& [name, t] : params) {
    if (ckpt.info(name)) continue;
    // A stacked expert parameter: its per-expert tensors (the layout checkpoints ship), each
    // named when missing; none of them at all: the parameter is named with its first piece.
    std::vector<std::string> absent;
    std::size_t of = 0;
    for (const auto& [pname, piece] : pieces)
      if (piece.param == name) {
        ++of;
        if (!ckpt.info(pname)) absent.push_back(pname);
      }
    if (of > 0 && absent.size() < of) {
      for (const std::string& a : absent)
        if (missing++ < kMaxListed)
          errs.push_back(error_at(where, a,
                                  "missing: " + describe(cfg) + " (" + std::to_string(cfg.hf.num_experts) +
                                      " experts) needs every expert's tensor"));
      continue;
    }
    if (missing++ < kMaxListed)
      errs.push_back(error_at(where, name,
                              "missing: " + describe(cfg) + " needs it with shape " + shape_text(t.sizes()) +
                                  (of > 0 ? " (or per expert, as " + absent.front() + " ...)" : std::string())));
  }
  for (const auto& [name, qe] : qexp) {
    if (ckpt.info(name)) continue;
    std::vector<std::string> absent;
    for (const auto& [pname, piece] : pieces) {
      if (piece.param != name) continue;
      const SafetensorsTensorInfo* info = ckpt.info(pname);
      if (!info) {
        absent.push_back(pname);
      } else if (pre && info->dtype == SafetensorsDtype::U8) {  // bitsandbytes' quant state beside it
        std::vector<std::string> need{pname + ".absmax", pname + ".quant_map"};
        if (!has_quant_state(ckpt, pname)) need.push_back(pname + ".quant_state.bitsandbytes__nf4");
        for (const std::string& t : need)
          if (!ckpt.info(t) && missing++ < kMaxListed)
            errs.push_back(
                error_at(where, t, "missing: a bitsandbytes 4-bit expert (" + pname + ") needs it beside it"));
      }
    }
    for (const std::string& a : absent)
      if (missing++ < kMaxListed)
        errs.push_back(error_at(where, a,
                                "missing: " + describe(cfg) + " (" + std::to_string(cfg.hf.num_experts) +
                                    " experts) needs every expert's tensor, or " + name + " " +
                                    shape_text(qe.first->shape_of(qe.second))));
  }
  for (const auto& [m, lin] : qlin) {
    if (pre && ckpt.info(m + ".weight")) {  // bitsandbytes' quant state beside it
      const std::string w = m + ".weight.";
      std::vector<std::string> need{w + "absmax", w + "quant_map"};
      if (!has_quant_state(ckpt, m + ".weight")) need.push_back(w + "quant_state.bitsandbytes__nf4");
      if (ckpt.info(w + "nested_absmax") || ckpt.info(w + "nested_quant_map"))
        for (const char* part : {"nested_absmax", "nested_quant_map"}) need.push_back(w + part);
      for (const std::string& t : need)
        if (!ckpt.info(t) && missing++ < kMaxListed)
          errs.push_back(
              error_at(where, t, "missing: a bitsandbytes 4-bit weight (" + m + ".weight) needs it beside it"));
    }
    if (ckpt.info(m + ".weight")) continue;
    if (missing++ < kMaxListed)
      errs.push_back(error_at(where, m + ".weight",
                              "missing: " + describe(cfg) + " needs it with shape [" +
                                  std::to_string(lin->out_features) + ", " + std::to_string(lin->in_features) + "]"));
  }
  for (auto [n, what] : {std::pair{extra, "unexpected"}, std::pair{missing, "missing"}, std::pair{bad, "mismatched"}})
    if (n > kMaxListed)
      errs.push_back(error_at(where, "", "... and " + std::to_string(n - kMaxListed) + " more " + what + " tensors"));
  if (text_view)  // name tensors as the wrapper's files do (language_model.model.X), as the user sees them
    for (Diagnostic& e : errs)
      if (!e.key.empty() && !text_model_name(cfg.hf, wrapper_tensor_name(cfg.hf, e.key)).empty()) {
        const std::string stored_as = ckpt.stored_name(e.key);
        e.key = stored_as.empty() ? wrapper_tensor_name(cfg.hf, e.key) : stored_as;
      }
  if (has_errors(errs)) return errs;

  torch::NoGradGuard no_grad;
  for (auto& [name, t] : params) {
    if (!ckpt.info(name)) continue;  // filled from its per-expert tensors below
    if (prequantized_param(name)) {
      auto q = read_prequantized(ckpt, name.substr(0, name.size() - 7), t.sizes().vec(), t.device());
      errs.insert(errs.end(), q.diagnostics.begin(), q.diagnostics.end());
      if (q.ok()) t.copy_(kernels::dequantize_4bit(*q.value, t.scalar_type()));
      continue;
    }
    Result<torch::Tensor> r = ckpt.load(name, t.scalar_type(), t.device());
    if (!r.ok()) {
      errs.insert(errs.end(), r.diagnostics.begin(), r.diagnostics.end());
      continue;
    }
    t.copy_(r.value);
  }
  for (const auto& [pname, piece] : pieces) {
    if (!ckpt.info(pname) || qexp.count(piece.param)) continue;
    torch::Tensor t = params.at(piece.param);
    if (prequantized_param(pname)) {
      auto q = read_prequantized(ckpt, pname.substr(0, pname.size() - 7), piece.shape, t.device());
      errs.insert(errs.end(), q.diagnostics.begin(), q.diagnostics.end());
      if (q.ok())
        (piece.expert < 0 ? t : t[piece.expert])
            .narrow(0, piece.row0, piece.rows)
            .copy_(kernels::dequantize_4bit(*q.value, t.scalar_type()));
      continue;
    }
    Result<torch::Tensor> r = ckpt.load(pname, t.scalar_type(), t.device());
    if (!r.ok()) {
      errs.insert(errs.end(), r.diagnostics.begin(), r.diagnostics.end());
      continue;
    }
    (piece.expert < 0 ? t : t[piece.expert]).narrow(0, piece.row0, piece.rows).copy_(r.value);
  }
  // One projection at a time: read in the model's dtype on the model's device, quantize,
  // drop the 16-bit copy; the peak is the 4-bit model plus one 16-bit weight.
  const torch::Device device = lm->options().device;
  const auto type = kernels::parse_quant4_type(cfg.quant.type);
  for (auto& [m, lin] : qlin) {
    if (pre) {
      auto q = read_prequantized(ckpt, m, {lin->out_features, lin->in_features}, device);
      errs.insert(errs.end(), q.diagnostics.begin(), q.diagnostics.end());
      if (q.ok()) lin->quant = q.value;
      continue;
    }
    Result<torch::Tensor> r = ckpt.load(m + ".weight", lin->dtype, device);
    if (!r.ok()) {
      errs.insert(errs.end(), r.diagnostics.begin(), r.diagnostics.end());
      continue;
    }
    lin->quant = kernels::quantize_4bit(r.value, type.value_or(kernels::Quant4Type::NF4), cfg.quant.blocksize,
                                        cfg.quant.double_quant);
  }
  // 4-bit experts, one stacked parameter at a time: assembled in the model's dtype (fp32 from
  // 4-bit pieces, whose dequantized values it holds exactly), quantized, the copy dropped; the
  // peak is the 4-bit model plus one layer's stacked parameter.
  for (const auto& [name, qe] : qexp) {
    auto& [ex, which] = qe;
    const std::vector<std::int64_t> shape = ex->shape_of(which);
    torch::Tensor whole;
    auto quant_type = type.value_or(kernels::Quant4Type::NF4);
    std::int64_t blocksize = cfg.quant.blocksize;
    bool nested = cfg.quant.double_quant;
    if (ckpt.info(name)) {
      Result<torch::Tensor> r = ckpt.load(name, ex->dtype, device);
      errs.insert(errs.end(), r.diagnostics.begin(), r.diagnostics.end());
      if (!r.ok()) continue;
      whole = r.value;
    } else {
      bool any_4bit = false;
      for (const auto& [pname, piece] : pieces)
        if (piece.param == name && ckpt.info(pname)->dtype == SafetensorsDtype::U8) any_4bit = true;
      whole = torch::empty(shape, torch::TensorOptions().dtype(any_4bit ? torch::kFloat32 : ex->dtype).device(device));
      bool ok = true;
      for (const auto& [pname, piece] : pieces) {
        if (piece.param != name) continue;
        torch::Tensor slice = whole[piece.expert].narrow(0, piece.row0, piece.rows);
        if (ckpt.info(pname)->dtype == SafetensorsDtype::U8) {
          auto q = read_prequantized(ckpt, pname.substr(0, pname.size() - 7), piece.shape, device);
          errs.insert(errs.end(), q.diagnostics.begin(), q.diagnostics.end());
          if (!q.ok()) {
            ok = false;
            continue;
          }
          // The checkpoint's own settings: the stack is quantized as its experts were.
          quant_type = q.value->type;
          blocksize = q.value->blocksize;
          nested = q.value->nested;
          slice.copy_(kernels::dequantize_4bit(*q.value, torch::kFloat32));
        } else {
          Result<torch::Tensor> r = ckpt.load(pname, whole.scalar_type(), device);
          errs.insert(errs.end(), r.diagnostics.begin(), r.diagnostics.end());
          if (!r.ok()) {
            ok = false;
            continue;
          }
          slice.copy_(r.value);
        }
      }
      if (!ok) continue;
    }
    auto q = kernels::quantize_4bit(whole, quant_type, blocksize, nested);
    q->dtype = ex->dtype;
    (which == "gate_up_proj" ? ex->gate_up_quant : ex->down_quant) = q;
  }
  return errs;
}

namespace {

// tie_word_embeddings as transformers 5.17 settles it against the weights (PreTrainedModel's
// tie_weights): a wrapper silent about it whose config class defaults it to true
// (HfModelConfig::tie_unstated) ties lm_head to the embedding where no lm_head.weight is stored;
// a config that ties them while the weights hold an lm_head.weight unlike the embedding leaves
// them untied, with a warning. Compared in the stored dtype on the mapped files.
Diagnostics resolve_tied_head(HfModelConfig& hf, const SafetensorsCheckpoint& stored) {
  SafetensorsCheckpoint ckpt = stored;
  if (!hf.wrapper_architecture.empty()) ckpt.rename([&](const std::string& name) { return text_model_name(hf, name); });
  Diagnostics out;
  const bool has_head = ckpt.info("lm_head.weight") != nullptr;
  if (hf.tie_unstated && !hf.tie_word_embeddings && !has_head) {
    hf.tie_word_embeddings = true;
    return out;
  }
  if (!hf.tie_word_embeddings || !has_head || !ckpt.info("model.embed_tokens.weight")) return out;
  auto head = ckpt.view("lm_head.weight");
  auto embed = ckpt.view("model.embed_tokens.weight");
  if (!head.ok() || !embed.ok()) return out;  // load_weights reports what cannot be read
  // (A head stored in another dtype is compared as the embedding's dtype, as both load as one.)
  if (head.value.sizes() == embed.value.sizes() && torch::equal(head.value.to(embed.value.scalar_type()), embed.value))
    return out;
  hf.tie_word_embeddings = false;
  Diagnostic d;
  d.severity = Severity::Warning;
  d.file = ckpt.file_of("lm_head.weight");
  d.key = ckpt.stored_name("lm_head.weight");
  d.message =
      "config.json ties lm_head to the embedding (tie_word_embeddings true), but this lm_head.weight "
      "differs from the embedding: it is kept and trained as its own weight, as transformers does";
  out.push_back(std::move(d));
  return out;
}

}  // namespace

Result<LoadedModel> load_causal_lm(const std::string& model_dir, const DecoderOptions& options) {
  Result<LoadedModel> r;
  Result<DecoderConfig> cfg = load_decoder_config(model_dir);
  r.diagnostics = cfg.diagnostics;
  if (!cfg.ok()) return r;
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(model_dir);
  r.diagnostics.insert(r.diagnostics.end(), ckpt.diagnostics.begin(), ckpt.diagnostics.end());
  if (!ckpt.ok()) return r;
  const Diagnostics tie = resolve_tied_head(cfg.value.hf, ckpt.value);
  r.diagnostics.insert(r.diagnostics.end(), tie.begin(), tie.end());
  // config.json against the headers' shapes before the model is built (and allocated).
  std::vector<std::pair<std::string, const SafetensorsHeader*>> headers;
  for (const auto& f : ckpt.value.files()) headers.emplace_back(f->path(), &f->header());
  const Diagnostics shape = check_config_against_weights(cfg.value.hf, cfg.value.file, headers);
  r.diagnostics.insert(r.diagnostics.end(), shape.begin(), shape.end());
  if (has_errors(shape)) return r;
  // A pre-quantized MoE checkpoint whose first expert tensor is 16-bit keeps 16-bit experts.
  if (cfg.value.quant.prequantized && cfg.value.hf.is_moe()) {
    const HfModelConfig& hf = cfg.value.hf;
    const ModelFamily& f = hf.family_row();
    for (std::int64_t i = 0; i < hf.num_hidden_layers; ++i) {
      if (!hf.moe_layer(i)) continue;
      const std::string layer = "model.layers." + std::to_string(i) + ".";
      const SafetensorsTensorInfo* info = ckpt.value.info(layer + "mlp.experts.gate_up_proj");
      if (!info)
        info = ckpt.value.info(layer + std::string(f.moe_module()) + ".experts.0." + std::string(f.expert_gate()) +
                               ".weight");
      cfg.value.quant.experts_16bit = info && info->dtype != SafetensorsDtype::U8;
      break;
    }
  }
  r.value.config = cfg.value;
  r.value.lm = CausalLM(cfg.value, options);
  std::error_code ec;
  const fs::path dir(model_dir);
  const fs::path index = dir / "model.safetensors.index.json";
  const std::string where =
      fs::is_directory(dir, ec) ? (fs::exists(index, ec) ? index : dir / "model.safetensors").string() : model_dir;
  Diagnostics d = load_weights(r.value.lm, ckpt.value, where);
  r.diagnostics.insert(r.diagnostics.end(), d.begin(), d.end());
  if (has_errors(d)) r.value.lm = CausalLM(nullptr);
  return r;
}

NamedTensors hub_layout_tensors(CausalLM& lm) {
  const std::map<std::string, ExpertPiece> pieces = expert_pieces(lm);
  std::map<std::string, std::vector<std::pair<std::string, const ExpertPiece*>>> of_param;
  for (const auto& [name, piece] : pieces) of_param[piece.param].emplace_back(name, &piece);
  NamedTensors tensors;
  for (const auto& p : lm->named_parameters(true)) {
    const torch::Tensor t = p.value().detach();
    auto it = of_param.find(p.key());
    if (it == of_param.end()) {
      tensors.emplace_back(p.key(), t);
      continue;
    }
    for (const auto& [name, piece] : it->second)
      tensors.emplace_back(name,
                           (piece->expert < 0 ? t : t[piece->expert]).narrow(0, piece->row0, piece->rows).contiguous());
  }
  return tensors;
}

Result<std::vector<std::string>> save_weights(CausalLM& lm, const std::string& dir, std::uint64_t max_shard_bytes,
                                              bool copy_config) {
  if (const std::string q = first_4bit_weight(lm); !q.empty()) {
    Result<std::vector<std::string>> r;
    r.diagnostics.push_back(
        error_at(dir, q,
                 "the model has 4-bit base weights; merge the adapter into them first (export --merge "
                 "dequantizes), Odyssey does not write a 4-bit checkpoint here"));
    return r;
  }
  NamedTensors tensors = hub_layout_tensors(lm);
  const HfModelConfig& hf = lm->config().hf;
  if (!hf.wrapper_architecture.empty()) {
    // A multimodal wrapper (Gemma-3 4B/12B/27B) is written whole, as its loaders read it: the
    // language model under the wrapper's names, the rest (vision tower, projector) copied
    // unchanged from the checkpoint it was loaded from.
    for (auto& [name, t] : tensors) name = wrapper_tensor_name(hf, name);
    const std::string src = fs::path(lm->config().file).parent_path().string();
    Result<SafetensorsCheckpoint> from = SafetensorsCheckpoint::open(src);
    if (!from.ok()) {
      Result<std::vector<std::string>> r;
      r.diagnostics = from.diagnostics;
      r.diagnostics.push_back(error_at(dir, "",
                                       "the vision tower of " + hf.wrapper_architecture +
                                           " is copied from the model it was loaded from (" + src +
                                           "), which cannot be read"));
      return r;
    }
    for (const std::string& name : from.value.names()) {
      if (!text_model_name(hf, name).empty()) continue;
      Result<torch::Tensor> t = from.value.view(name);
      if (!t.ok()) {
        Result<std::vector<std::string>> r;
        r.diagnostics = t.diagnostics;
        return r;
      }
      tensors.emplace_back(name, t.value);
    }
  }
  Result<std::vector<std::string>> r = save_sharded(dir, tensors, max_shard_bytes);
  if (!r.ok() || !copy_config) return r;
  std::error_code ec;
  const fs::path src(lm->config().file), dst = fs::path(dir) / "config.json";
  if (!src.empty() && !fs::equivalent(src, dst, ec)) {
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    if (ec)
      r.diagnostics.push_back(
          error_at(dst.string(), "", "cannot copy config.json from " + src.string() + ": " + ec.message()));
  }
  return r;
}

Result<std::vector<std::string>> save_weights_4bit(CausalLM& lm, const std::string& dir, const QuantSettings& quant,
                                                   std::uint64_t max_shard_bytes) {
  Result<std::vector<std::string>> r;
  const auto type = kernels::parse_quant4_type(quant.type);
  if (quant.bits != 4 || !type || !kernels::valid_quant4_blocksize(quant.blocksize)) {
    r.diagnostics.push_back(error_at(dir, "quantize", "expected 4 bits, nf4 or fp4 and a bitsandbytes blocksize"));
    return r;
  }
  if (const std::string q = first_4bit_weight(lm); !q.empty()) {
    r.diagnostics.push_back(
        error_at(dir, q, "holds 4-bit weights already; merge (dequantize) before writing a new 4-bit checkpoint"));
    return r;
  }
  const torch::ScalarType dtype = lm->options().dtype;
  const char* dtype_text = dtype == torch::kFloat32 ? "float32" : dtype == torch::kHalf ? "float16" : "bfloat16";
  std::map<std::string, const LinearImpl*> linears;  // the decoder layers' projections
  for (const auto& item : lm->named_modules("", false))
    if (const auto* l = dynamic_cast<const LinearImpl*>(item.value().get());
        l && item.key().rfind("model.layers.", 0) == 0 && item.key().find(".lora_") == std::string::npos)
      linears.emplace(item.key(), l);
  NamedTensors tensors;
  torch::NoGradGuard no_grad;
  for (const auto& p : lm->named_parameters(true)) {
    const std::string& name = p.key();
    const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : std::string();
    if (!linears.count(module) || !quant.quantizes(module)) {
      tensors.emplace_back(name, p.value().detach());
      continue;
    }
    const auto q = kernels::quantize_4bit(p.value().detach(), *type, quant.blocksize, quant.double_quant);
    nlohmann::json state = {
        {"quant_type", quant.type}, {"blocksize", quant.blocksize}, {"dtype", dtype_text}, {"shape", q->shape}};
    tensors.emplace_back(name, q->packed.cpu());
    tensors.emplace_back(name + ".absmax", q->absmax.cpu());
    tensors.emplace_back(name + ".quant_map", q->code.cpu());
    if (q->nested) {
      state["nested_blocksize"] = q->nested_blocksize;
      state["nested_dtype"] = "float32";
      state["nested_offset"] = static_cast<double>(q->offset);
      tensors.emplace_back(name + ".nested_absmax", q->nested_absmax.cpu());
      tensors.emplace_back(name + ".nested_quant_map", q->nested_code.cpu());
    }
    const std::string bytes = state.dump();
    torch::Tensor packed_state = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(packed_state.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
    tensors.emplace_back(name + ".quant_state.bitsandbytes__" + quant.type, packed_state);
  }
  r = save_sharded(dir, tensors, max_shard_bytes);
  if (!r.ok()) return r;
  // config.json: the source's, with the quantization transformers will read.
  const std::string src = lm->config().file;
  std::ifstream in(src);
  nlohmann::json cfg = nlohmann::json::parse(in, nullptr, false);
  if (!cfg.is_object()) {
    r.diagnostics.push_back(error_at(src, "", "cannot be read as JSON to write the 4-bit checkpoint's config.json"));
    return r;
  }
  cfg["quantization_config"] = {
      {"quant_method", "bitsandbytes"},
      {"load_in_4bit", true},
      {"load_in_8bit", false},
      {"bnb_4bit_quant_type", quant.type},
      {"bnb_4bit_use_double_quant", quant.double_quant},
      {"bnb_4bit_compute_dtype", dtype_text},
      {"bnb_4bit_quant_storage", "uint8"},
      {"llm_int8_skip_modules",
       quant.skip_modules.empty() ? nlohmann::json(nullptr) : nlohmann::json(quant.skip_modules)}};
  const fs::path dst = fs::path(dir) / "config.json";
  std::ofstream out(dst, std::ios::trunc);
  out << cfg.dump(2) << '\n';
  if (!out) r.diagnostics.push_back(error_at(dst.string(), "", "cannot be written"));
  return r;
}

}  // namespace odyssey::model
