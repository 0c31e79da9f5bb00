// Odyssey's 4-bit quantization (kernels/quant4.h) against bitsandbytes itself: the oracle
// (tests/reference/bnb_oracle.py) quantizes odd shapes with every blocksize, NF4 and FP4,
// with and without double quantization, on the CPU; the packed bytes, the absmax values, the
// nested constants and the offset must be bit-identical, and the dequantized weights equal
// in fp32 and in bf16. Prints the table of the closing note.
// LibTorch before Qt: Qt's `slots` macro breaks LibTorch's headers (IValue::slots()).
#include "kernels/quant4.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "train/lora.h"
// clang-format off
#include <QProcess>
#include <QtTest>
// clang-format on

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>

#include <nlohmann/json.hpp>

using namespace odyssey;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool identical(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  if (a.is_floating_point())  // bitwise, so that -0 / +0 and NaN payloads count too
    return torch::equal(a.contiguous().view(a.element_size() == 4 ? torch::kInt32 : torch::kInt16),
                        b.contiguous().view(b.element_size() == 4 ? torch::kInt32 : torch::kInt16));
  return torch::equal(a, b);
}

// The fp32 absmax per block of x (bitsandbytes' first stage, before double quantization).
torch::Tensor quant4_plain_absmax(const torch::Tensor& x, std::int64_t blocksize) {
  return kernels::quantize_4bit(x, kernels::Quant4Type::NF4, blocksize, false)->absmax;
}

}  // namespace

class TstQuant4 : public QObject {
  Q_OBJECT
  fs::path tmp_;
  QString python_, oracle_error_;
  std::shared_ptr<const SafetensorsFile> ref_;
  json cases_;

  torch::Tensor ref(const std::string& name) {
    const auto r = ref_->load_as_stored(name);
    if (!r.ok()) qFatal("%s", format_all(r.diagnostics).c_str());
    return r.value;
  }

  void need_oracle() {
    if (python_.isEmpty())
      QSKIP("ODYSSEY_PYTHON is empty: configure with -DODYSSEY_PYTHON=<a Python with torch and bitsandbytes>");
    QVERIFY2(ref_ != nullptr, qPrintable(oracle_error_));
  }

 private slots:
  void initTestCase() {
    tmp_ = fs::temp_directory_path() / ("odyssey-quant4-" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
    python_ = QString(ODYSSEY_PYTHON);
    if (!python_.isEmpty() && !QFileInfo::exists(python_)) python_.clear();
    if (python_.isEmpty()) return;
    const std::string out = (tmp_ / "cases.safetensors").string();
    QProcess p;
    p.start(python_,
            {QString(ODYSSEY_SOURCE_DIR) + "/tests/reference/bnb_oracle.py", "cases", QString::fromStdString(out)});
    if (!p.waitForFinished(600000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
      oracle_error_ = "bnb_oracle.py failed (is bitsandbytes installed? packaging/install-deps.sh installs it):\n" +
                      QString::fromUtf8(p.readAllStandardError());
      return;
    }
    auto f = SafetensorsFile::open(out);
    if (!f.ok()) {
      oracle_error_ = QString::fromStdString(format_all(f.diagnostics));
      return;
    }
    ref_ = f.value;
    cases_ = json::parse(ref_->header().metadata.at("cases"));
  }
  void cleanupTestCase() { fs::remove_all(tmp_); }

  void codesAreBitsandbytes() {
    // NF4's and FP4's 16 values and the dynamic map, against the tables the oracle's constants
    // were quantized with (quant_map is stored by bitsandbytes in every checkpoint).
    need_oracle();
    for (const auto& c : cases_) {
      if (!c["double_quant"].get<bool>()) continue;
      QVERIFY2(identical(kernels::dynamic_map_signed(), ref(c["name"].get<std::string>() + ".nested_code")),
               "the signed dynamic map differs from bitsandbytes'");
      break;
    }
    // NF4 is sorted, FP4 is indexed by its sign/exponent/mantissa bits (bitsandbytes' order).
    const torch::Tensor nf4 = kernels::quant4_code(kernels::Quant4Type::NF4);
    QCOMPARE(nf4.size(0), 16);
    QVERIFY(torch::equal(std::get<0>(nf4.sort()), nf4));
    const torch::Tensor fp4 = kernels::quant4_code(kernels::Quant4Type::FP4);
    QCOMPARE(fp4[3].item<float>(), 1.0f);
    QCOMPARE(fp4[11].item<float>(), -1.0f);
  }

  void bitIdenticalToBitsandbytes() {
    need_oracle();
    int rows = 0;
    std::map<std::string, std::pair<int, int>> table;  // "nf4 dq" -> (identical, cases)
    std::int64_t nested_total = 0, nested_diff = 0;
    QStringList failures;
    for (const auto& c : cases_) {
      const std::string n = c["name"];
      const auto type = *kernels::parse_quant4_type(c["quant_type"].get<std::string>());
      const bool dq = c["double_quant"];
      const std::int64_t bs = c["blocksize"];
      const auto q = kernels::quantize_4bit(ref(n + ".input"), type, bs, dq);
      const std::string what = n + " " + c["kind"].get<std::string>() + " " + c["dtype"].get<std::string>() + " " +
                               c["quant_type"].get<std::string>() + (dq ? " double-quant" : "") + " blocksize " +
                               std::to_string(bs) + " shape " + c["shape"].dump();
      bool ok = true;
      auto check = [&](bool same, const char* part) {
        if (!same) {
          ok = false;
          failures << QString::fromStdString(what + ": " + part + " differ");
          std::printf("MISMATCH %s: %s\n", what.c_str(), part);
        }
      };
      check(identical(q->code, ref(n + ".code")), "4-bit code tables");
      check(identical(q->packed, ref(n + ".packed")), "packed codes");
      if (!dq) {
        check(identical(q->absmax, ref(n + ".absmax")), "absmax");
      } else {
        check(identical(q->nested_absmax, ref(n + ".nested_absmax")), "nested absmax");
        check(identical(torch::tensor({q->offset}), ref(n + ".offset")), "offset");
        // The 8-bit codes of the absmax values: ours is the nearest code of the dynamic map.
        // bitsandbytes 0.50's CPU quantizer (a bucketed float search) returns a code that is
        // not the nearest for about 0.15% of values (1.87e-6 → 2.125e-5 where 5.5e-7 is
        // nearer); such a value may differ, and only where ours is strictly nearer.
        const torch::Tensor theirs = ref(n + ".absmax"), ours = q->absmax;
        check(ours.sizes() == theirs.sizes(), "absmax shapes");
        if (ours.sizes() == theirs.sizes()) {
          const torch::Tensor diff = (ours != theirs).nonzero().reshape(-1);
          const torch::Tensor map = kernels::dynamic_map_signed();
          const torch::Tensor centered = quant4_plain_absmax(ref(n + ".input"), bs) - q->offset;
          for (std::int64_t k = 0; k < diff.size(0); ++k) {
            const std::int64_t i = diff[k].item<std::int64_t>();
            const float v = centered[i].item<float>() / q->nested_absmax[i / 256].item<float>();
            const float d_ours = std::fabs(v - map[ours[i].item<std::uint8_t>()].item<float>());
            const float d_theirs = std::fabs(v - map[theirs[i].item<std::uint8_t>()].item<float>());
            check(d_ours < d_theirs, "8-bit absmax codes (ours not nearer)");
          }
          nested_total += ours.numel();
          nested_diff += diff.size(0);
        }
      }
      kernels::Quant4Weight theirs = *q;
      theirs.packed = ref(n + ".packed");
      theirs.absmax = ref(n + ".absmax");
      if (dq) {
        theirs.nested_absmax = ref(n + ".nested_absmax");
        theirs.nested_code = ref(n + ".nested_code");
        theirs.offset = ref(n + ".offset").item<float>();
      }
      check(identical(kernels::dequantize_4bit(theirs, torch::kFloat32), ref(n + ".dequant")), "fp32 dequantized");
      check(identical(kernels::dequantize_4bit(theirs, torch::kBFloat16), ref(n + ".dequant_bf16")),
            "bf16 dequantized");
      auto& row = table[c["quant_type"].get<std::string>() + (dq ? " + double quant" : "")];
      row.second++;
      if (ok) row.first++;
      ++rows;
    }
    std::printf("\n| type | cases | bit-identical (packed, absmax, nested, offset, dequantized) |\n|---|---:|---:|\n");
    for (const auto& [k, v] : table) std::printf("| %s | %d | %d |\n", k.c_str(), v.second, v.first);
    std::printf(
        "8-bit absmax codes (double quantization): %lld of %lld differ from bitsandbytes' CPU quantizer, "
        "each where ours is the nearer code\n",
        static_cast<long long>(nested_diff), static_cast<long long>(nested_total));
    QVERIFY(rows >= 40);
    QVERIFY2(failures.isEmpty(), qPrintable(failures.join('\n')));
  }

  void roundTripOnOtherDevicesAndTypes() {
    // No oracle: dequantize(quantize(x)) is within half a code step of x in every block.
    torch::manual_seed(3);
    const torch::Tensor x = torch::randn({37, 80});
    for (auto t : {kernels::Quant4Type::NF4, kernels::Quant4Type::FP4})
      for (bool dq : {false, true}) {
        const auto q = kernels::quantize_4bit(x, t, 64, dq);
        QCOMPARE(q->packed.size(0), (x.numel() + 1) / 2);
        const torch::Tensor back = kernels::dequantize_4bit(*q, torch::kFloat32);
        QCOMPARE(back.sizes(), x.sizes());
        // The widest NF4 gap is 0.304 of absmax (-1 to -0.696), FP4's 0.333: half of it, plus the 8-bit
        // absmax's own error when double-quantized (a few percent of absmax at most).
        const double tol = (t == kernels::Quant4Type::NF4 ? 0.153 : 0.167) + (dq ? 0.03 : 1e-6);
        const torch::Tensor am = x.reshape(-1).narrow(0, 0, 2944).view({-1, 64}).abs().amax(1, true);
        const torch::Tensor err = (back - x).reshape(-1).narrow(0, 0, 2944).view({-1, 64}).abs() / am;
        QVERIFY2(err.max().item<double>() <= tol, qPrintable(QString::number(err.max().item<double>())));
      }
  }

  // slice_4bit (a rank's share of a 4-bit expert stack under expert parallelism): its values
  // are exactly those rows of the whole stack's, nested or not, NF4 or FP4; rows that are not
  // whole blocks are refused, naming the sizes.
  void sliceKeepsTheRowsValues() {
    torch::manual_seed(4);
    const torch::Tensor w = torch::randn({8, 24, 32});  // 768 values an expert: 12 blocks of 64
    for (auto t : {kernels::Quant4Type::NF4, kernels::Quant4Type::FP4})
      for (bool dq : {false, true}) {
        const auto q = kernels::quantize_4bit(w, t, 64, dq);
        const torch::Tensor whole = kernels::dequantize_4bit(*q, torch::kFloat32);
        for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 4}, {4, 4}, {3, 2}, {7, 1}}) {
          const auto s = kernels::slice_4bit(*q, first, count);
          QCOMPARE(s->shape, (std::vector<std::int64_t>{count, 24, 32}));
          QVERIFY(!s->nested);
          QVERIFY(torch::equal(kernels::dequantize_4bit(*s, torch::kFloat32), whole.narrow(0, first, count)));
          QVERIFY(torch::equal(kernels::dequantize_4bit(*s, torch::kBFloat16),
                               kernels::dequantize_4bit(*q, torch::kBFloat16).narrow(0, first, count)));
        }
      }
    const auto odd = kernels::quantize_4bit(torch::randn({4, 3, 10}), kernels::Quant4Type::NF4, 64, true);
    bool threw = false;
    try {
      kernels::slice_4bit(*odd, 1, 2);
    } catch (const c10::Error& e) {
      threw = std::string(e.what()).find("30 values is not whole blocks of 64") != std::string::npos;
    }
    QVERIFY(threw);
  }

  // A tiny Llama quantized and saved by transformers + bitsandbytes (the "-bnb-4bit" layout)
  // loads as it is and computes transformers' logits; the same model in fp32 quantized by
  // Odyssey on load computes them too.
  void loadsBitsandbytesCheckpoints() {
    need_oracle();
    for (const char* variant : {"nf4 dq", "fp4 nodq"}) {
      const QStringList parts = QString(variant).split(' ');
      const fs::path dir = tmp_ / ("model-" + parts.join('-').toStdString());
      QProcess p;
      p.start(python_, {QString(ODYSSEY_SOURCE_DIR) + "/tests/reference/bnb_oracle.py", "model",
                        QString::fromStdString(dir.string()), parts[0], parts[1]});
      QVERIFY(p.waitForFinished(600000) && p.exitCode() == 0);
      auto ref = SafetensorsFile::open((dir / "logits.safetensors").string());
      QVERIFY(ref.ok());
      const torch::Tensor ids = ref.value->load("input_ids", torch::kFloat32).value.to(torch::kLong);
      const torch::Tensor want = ref.value->load("exact_logits", torch::kFloat32).value;
      const double want_loss = ref.value->load("exact_loss", torch::kFloat32).value.item<double>();
      const double hf_loss = ref.value->load("loss", torch::kFloat32).value.item<double>();
      for (bool on_load : {false, true}) {
        model::DecoderOptions o;
        if (on_load) {
          o.quant.bits = 4;
          o.quant.type = parts[0].toStdString();
          o.quant.double_quant = parts[1] == "dq";
        }
        auto m = model::load_causal_lm((dir / (on_load ? "model16" : "model4")).string(), o);
        QVERIFY2(m.ok(), format_all(m.diagnostics).c_str());
        const auto quantized = model::quantized_linears(m.value.lm);
        QCOMPARE(quantized.size(), std::size_t{14});
        for (const auto& [name, l] : quantized) QVERIFY2(l->quant, name.c_str());
        QCOMPARE(m.value.lm->named_parameters().contains("model.layers.0.mlp.up_proj.weight"), false);
        torch::NoGradGuard ng;
        const torch::Tensor logits = m.value.lm->forward(ids);
        const double rel = ((logits - want).abs().max() / want.abs().max()).item<double>();
        const double loss = model::causal_lm_loss(logits, ids).item<double>();
        std::printf(
            "%s, %s: logits max rel diff %.3g from fp32 on bitsandbytes' dequantized weights; loss %.6f "
            "(that model %.6f, transformers + bitsandbytes %.6f)\n",
            variant, on_load ? "quantized on load" : "read pre-quantized", rel, loss, want_loss, hf_loss);
        // Pre-quantized: the same dequantized weights, fp32 rounding only. On load: a few 8-bit
        // absmax codes may differ (bitIdenticalToBitsandbytes), so the 1e-3. The loss of
        // transformers' own forward (bitsandbytes' CPU kernel, not fp32) within the 1e-3.
        QVERIFY2(rel <= (on_load ? 1e-3 : 1e-5), qPrintable(QString::number(rel)));
        QVERIFY(std::fabs(loss - want_loss) <= (on_load ? 1e-3 : 1e-5));
        QVERIFY(std::fabs(loss - hf_loss) <= 1e-3);
      }
    }
  }

  // 4-bit experts (docs/moe.md) on a tiny Qwen3-MoE: quantized on load, each stacked expert
  // parameter is one 4-bit weight and the model computes transformers' fp32 forward on
  // bitsandbytes' dequantization of that stack; a transformers 4 + bitsandbytes checkpoint (every
  // expert and the router 4-bit on its own) loads and computes the forward on bitsandbytes'
  // dequantization of its pieces (the router dequantized into its 16-bit parameter). LoRA on attention and experts over
  // 4-bit experts gets the gradients of the same adapters over the 16-bit model holding those dequantized weights.
  void moeExpertsIn4bit() {
    need_oracle();
    for (const char* variant : {"fp4 nodq", "nf4 dq"}) {
      const QStringList parts = QString(variant).split(' ');
      const bool nested = parts[1] == "dq";
      const fs::path dir = tmp_ / ("moe-" + parts.join('-').toStdString());
      QProcess p;
      p.start(python_, {QString(ODYSSEY_SOURCE_DIR) + "/tests/reference/bnb_oracle.py", "moe",
                        QString::fromStdString(dir.string()), parts[0], parts[1]});
      QVERIFY(p.waitForFinished(600000) && p.exitCode() == 0);
      auto ref = SafetensorsFile::open((dir / "logits.safetensors").string());
      QVERIFY(ref.ok());
      const torch::Tensor ids = ref.value->load("input_ids", torch::kFloat32).value.to(torch::kLong);
      model::DecoderOptions on_load;
      on_load.quant.bits = 4;
      on_load.quant.type = parts[0].toStdString();
      on_load.quant.double_quant = nested;
      // Without nesting, the codes and fp32 absmax are bitsandbytes' own: fp32 rounding only.
      // Nested, a few 8-bit absmax codes may differ (quantized on load: bitIdenticalToBitsandbytes;
      // pieces: the stack's constants are nested again over all experts): the 1e-3.
      const double tol = nested ? 1e-3 : 1e-5;
      for (const auto& [source, opts, want_name] : {std::tuple{"model16", on_load, "stack_logits"},
                                                    std::tuple{"model4", model::DecoderOptions{}, "pieces_logits"}}) {
        auto m = model::load_causal_lm((dir / source).string(), opts);
        QVERIFY2(m.ok(), format_all(m.diagnostics).c_str());
        QCOMPARE(model::quantized_experts(m.value.lm).size(), std::size_t{2});
        QCOMPARE(model::quantized_linears(m.value.lm).size(), std::size_t{8});  // q, k, v, o of 2 layers
        QCOMPARE(m.value.lm->named_parameters().contains("model.layers.0.mlp.experts.gate_up_proj"), false);
        const auto q = model::quant4_weights(m.value.lm);
        const auto& gu = q.at("model.layers.1.mlp.experts.gate_up_proj");
        QVERIFY(gu && gu->shape == (std::vector<std::int64_t>{5, 128, 64}) && gu->nested == nested);
        torch::NoGradGuard ng;
        const torch::Tensor want = ref.value->load(want_name, torch::kFloat32).value;
        const torch::Tensor logits = m.value.lm->forward(ids);
        const double rel = ((logits - want).abs().max() / want.abs().max()).item<double>();
        std::printf("MoE %s, %s: logits max rel diff %.3g from fp32 on bitsandbytes' dequantized experts\n", variant,
                    source, rel);
        QVERIFY2(rel <= tol, qPrintable(QString::number(rel)));
      }
      // LoRA on q/k/v/o and the experts (all-linear: the MLP names mean the experts), adapters
      // random: loss and every adapter gradient against the 16-bit model on exact_stack.
      auto run = [&](const fs::path& path, const model::DecoderOptions& o) {
        auto m = model::load_causal_lm(path.string(), o);
        if (!m.ok()) qFatal("%s", format_all(m.diagnostics).c_str());
        train::LoraSettings ls;
        ls.rank = 4;
        ls.alpha = 8;
        ls.target_modules = train::lora_module_names();
        train::apply_lora(m.value.lm, ls);
        torch::manual_seed(3);
        std::map<std::string, torch::Tensor> adapters;
        for (auto& pr : m.value.lm->named_parameters(true))
          if (pr.key().find("lora_") != std::string::npos) {
            torch::NoGradGuard ng;
            pr.value().normal_(0.0, 0.05);
            adapters.emplace(pr.key(), pr.value());
          }
        const torch::Tensor loss = model::causal_lm_loss(m.value.lm->forward(ids), ids);
        loss.backward();
        return std::pair{loss.item<double>(), adapters};
      };
      const auto [loss4, a4] = run(dir / "model16", on_load);
      const auto [loss16, a16] = run(dir / "exact_stack", model::DecoderOptions{});
      QCOMPARE(a4.size(), a16.size());
      QVERIFY(a4.count("model.layers.0.mlp.experts.gate_up_proj_lora.lora_A"));
      QVERIFY2(std::fabs(loss4 - loss16) <= tol * std::fabs(loss16), qPrintable(QString::number(loss4 - loss16)));
      double worst = 0.0;
      for (const auto& [name, t] : a4) {
        const torch::Tensor g = t.grad(), g16 = a16.at(name).grad();
        QVERIFY2(g.defined() && g16.defined(), name.c_str());
        worst = std::max(worst, ((g - g16).abs().max() / g16.abs().max().clamp_min(1e-12)).item<double>());
      }
      std::printf(
          "MoE %s: LoRA loss %.6f vs %.6f on the dequantized 16-bit model; adapter gradients max rel diff %.3g\n",
          variant, loss4, loss16, worst);
      QVERIFY2(worst <= (nested ? 1e-2 : 1e-4), qPrintable(QString::number(worst)));
    }
    // transformers 5 + bitsandbytes leaves the experts 16-bit: so does Odyssey for its checkpoint.
    {
      auto m = model::load_causal_lm((tmp_ / "moe-nf4-dq" / "model4_t5").string(), model::DecoderOptions{});
      QVERIFY2(m.ok(), format_all(m.diagnostics).c_str());
      QVERIFY(model::quantized_experts(m.value.lm).empty());
      QCOMPARE(model::quantized_linears(m.value.lm).size(), std::size_t{8});
      QVERIFY(m.value.lm->named_parameters().contains("model.layers.0.mlp.experts.gate_up_proj"));
    }
    // A per-expert 4-bit tensor without its absmax: an error naming it.
    const fs::path good = tmp_ / "moe-nf4-dq" / "model4";
    const fs::path bad = tmp_ / "moe-damaged";
    fs::remove_all(bad);
    fs::copy(good, bad, fs::copy_options::recursive);
    {
      std::ifstream in(bad / "model.safetensors", std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      std::string bytes = ss.str();
      const std::string from = "model.layers.1.mlp.experts.3.up_proj.weight.absmax";
      const auto at = bytes.find(from);
      QVERIFY(at != std::string::npos);
      bytes.replace(at, from.size(), "model.layers.1.mlp.experts.3.up_proj.weight.absmaz");
      std::ofstream(bad / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
    }
    auto m = model::load_causal_lm(bad.string(), model::DecoderOptions{});
    QVERIFY(!m.ok());
    const std::string e = format_all(m.diagnostics);
    QVERIFY2(e.find("model.layers.1.mlp.experts.3.up_proj.weight.absmaz: unexpected tensor") != std::string::npos,
             e.c_str());
    QVERIFY2(e.find("model.layers.1.mlp.experts.3.up_proj.weight.absmax") != std::string::npos, e.c_str());
  }

  // Damaged 4-bit checkpoints: each an error naming the file and the tensor or key.
  void damagedCheckpointsAreNamed() {
    need_oracle();
    const fs::path good = tmp_ / "model-nf4-dq" / "model4";
    QVERIFY(fs::exists(good / "model.safetensors"));
    auto edit = [&](const std::string& tag, const std::string& from, const std::string& to, const char* file) {
      const fs::path dir = tmp_ / ("damaged-" + tag);
      fs::remove_all(dir);
      fs::copy(good, dir, fs::copy_options::recursive);
      std::ifstream in(dir / file, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      std::string bytes = ss.str();
      const auto at = bytes.find(from);
      if (at == std::string::npos) qFatal("%s not in %s", from.c_str(), file);
      bytes.replace(at, from.size(), to);
      std::ofstream(dir / file, std::ios::binary | std::ios::trunc) << bytes;
      return dir;
    };
    auto load_error = [](const fs::path& dir) {
      auto m = model::load_causal_lm(dir.string(), model::DecoderOptions{});
      return m.ok() ? std::string() : format_all(m.diagnostics);
    };
    // Same-length edits keep the safetensors header valid.
    std::string e = load_error(edit("blocksize", "\"blocksize\": 64", "\"blocksize\": 48", "model.safetensors"));
    QVERIFY2(
        e.find("quant_state.bitsandbytes__nf4: blocksize 48: bitsandbytes uses 32, 64, ..., 4096") != std::string::npos,
        e.c_str());
    e = load_error(edit("absmax", "model.layers.1.mlp.up_proj.weight.absmax",
                        "model.layers.1.mlp.up_proj.weight.absmaz", "model.safetensors"));
    QVERIFY2(e.find("model.layers.1.mlp.up_proj.weight.absmaz: unexpected tensor") != std::string::npos, e.c_str());
    QVERIFY2(
        e.find("model.layers.1.mlp.up_proj.weight.absmax: missing: a bitsandbytes 4-bit weight") != std::string::npos,
        e.c_str());
    e = load_error(edit("shape", "\"shape\": [128, 64]", "\"shape\": [128, 32]", "model.safetensors"));
    QVERIFY2(e.find("shape [128, 32]; the model's config.json gives [128, 64]") != std::string::npos, e.c_str());
    // A 4-bit checkpoint whose config.json lost its quantization_config.
    e = load_error(edit("noconfig", "\"quantization_config\"", "\"quantization_cfg_x__\"", "config.json"));
    QVERIFY2(e.find("model.layers.0.mlp.down_proj.weight.absmax: a bitsandbytes quant-state tensor, but config.json") !=
                 std::string::npos,
             e.c_str());
    // 8-bit bitsandbytes and other methods.
    e = load_error(edit("8bit", "\"load_in_8bit\": false", "\"load_in_8bit\": true ", "config.json"));
    QVERIFY2(e.find("quantization_config.load_in_8bit: 8-bit bitsandbytes checkpoints are not supported") !=
                 std::string::npos,
             e.c_str());
    e = load_error(
        edit("gptq", "\"quant_method\": \"bitsandbytes\"", "\"quant_method\": \"gptq\"        ", "config.json"));
    QVERIFY2(e.find("quantization_config.quant_method: 'gptq'") != std::string::npos, e.c_str());
  }

  void refusesWhatBitsandbytesRefuses() {
    const torch::Tensor x = torch::randn({4, 64});
    for (std::int64_t bs : {0, 16, 48, 8192}) {
      bool threw = false;
      try {
        kernels::quantize_4bit(x, kernels::Quant4Type::NF4, bs, false);
      } catch (const c10::Error& e) {
        threw = QString(e.what()).contains("blocksize");
      }
      QVERIFY2(threw, qPrintable(QString("blocksize %1 accepted").arg(bs)));
    }
    bool threw = false;
    try {
      kernels::quantize_4bit(torch::ones({4}, torch::kInt), kernels::Quant4Type::NF4, 64, false);
    } catch (const c10::Error&) {
      threw = true;
    }
    QVERIFY(threw);
  }
};

QTEST_APPLESS_MAIN(TstQuant4)
#include "tst_quant4.moc"
