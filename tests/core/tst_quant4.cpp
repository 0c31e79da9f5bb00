// Odyssey's 4-bit quantization (kernels/quant4.h) against bitsandbytes itself: the oracle
// (tests/reference/bnb_oracle.py) quantizes odd shapes with every blocksize, NF4 and FP4,
// with and without double quantization, on the CPU; the packed bytes, the absmax values, the
// nested constants and the offset must be bit-identical, and the dequantized weights equal
// in fp32 and in bf16. Prints the table of the closing note.
// LibTorch before Qt: Qt's `slots` macro breaks LibTorch's headers (IValue::slots()).
#include "kernels/quant4.h"
#include "model/safetensors.h"
// clang-format off
#include <QProcess>
#include <QtTest>
// clang-format on

#include <unistd.h>

#include <cmath>
#include <filesystem>
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
    p.start(python_, {QString(ODYSSEY_SOURCE_DIR) + "/tests/reference/bnb_oracle.py", "cases",
                      QString::fromStdString(out)});
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
    std::printf("8-bit absmax codes (double quantization): %lld of %lld differ from bitsandbytes' CPU quantizer, "
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
