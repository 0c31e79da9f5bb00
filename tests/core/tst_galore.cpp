// GaLore and Q-GaLore (docs/optimizers.md). What each test function enforces:
//
// - projectorAtFullRankIsExact: at full rank P Pᵀ G = G on both sides, max relative error < 1e-5.
// - randomizedSvdFindsTheSubspace: the randomized SVD's projection keeps at least 99.9% of the
//   share of ‖G‖ the exact SVD's keeps; the same seed gives the identical projection.
// - int4ProjectionWithinBound: Q-GaLore's int4 projection, every element within its group's
//   bound s/2, s = (max − min)/15; the share of ‖G‖ it keeps within 5% of fp32's.
// - eightBitMomentsWithinHalfAStep: the 8-bit moments within half a code step of their value
//   (relative 2^-4 above the format's smallest normal value, absolute below it); 256 sorted codes.
// - matchesGaLoreTorch, against galore-torch 1.0 (tests/reference/galore_reference.py: the same
//   tiny Qwen2, data and hyper-parameters, fp32, 6 steps):
//     "one projection" (gap 100): every loss within 1e-5 relative, every final weight within
//     1e-5 (max |Δ| / max |w| per tensor; k_proj.bias excepted, see the function), every
//     projection within 1e-4 of the reference's up to sign (|⟨p_i, q_i⟩| − 1);
//     "refresh every 2 steps": every loss within 1e-4 relative and every projection within
//     1e-2 up to sign; final weights are printed, not compared: after a refresh the moments are
//     carried into a basis whose SVD differs in the last bits, and the weights then differ by
//     up to 7.6e-3 relative on this project's CI machine (layer 0's down_proj, whose 6 steps
//     moved it by 9.1e-3 in all; untargeted weights up to 3.9e-3): a bound there would not
//     tell a right update from a wrong one.
// - convergesNearAdamW: on a copy task, 150 steps, GaLore (rank 16 of 64) and Q-GaLore each
//   cover at least 80% of AdamW's loss drop (mean of the last 10 steps), AdamW's drop above 1.
// - lazySubspaceRuleGrowsTheGap: Q-GaLore's lazy rule gives exactly the expected
//   update_proj_gap sequence when every refresh is similar (1, 1, 2, 2, 4, 4, 4, 4, 8) and
//   none is (all 1).
// - stateRoundTripResumesExactly: GaLore and Q-GaLore states saved after 3 of 6 steps and
//   loaded into a new optimizer continue bit-identically; the other kind's state is refused,
//   naming the file.
// - rankLargerThanAWeightIsRefused: a rank above a weight's smaller side is refused naming
//   galore_rank, the weight and its size.
#define QT_NO_KEYWORDS
#include <torch/torch.h>

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "model/safetensors.h"
#include "model/weights.h"
#include "train/batch.h"
#include "train/galore.h"
#include "train/quant.h"
#include "train/step_engine.h"

using namespace odyssey;
using namespace odyssey::model;
using namespace odyssey::train;

namespace {

double rel_err(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor g = got.detach().to(torch::kFloat64), w = want.detach().to(torch::kFloat64);
  const double scale = std::max(1e-30, w.abs().max().item<double>());
  return (g - w).abs().max().item<double>() / scale;
}

// A copy task: 12 random tokens from a 24-token alphabet, a separator, the same 12 again;
// only the copy is a target. Four samples per packed row.
std::vector<PackedRow> copy_task(int rows, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(10, 33);
  std::vector<PackedRow> out;
  for (int r = 0; r < rows; ++r) {
    std::vector<std::int32_t> ids, labels, pos;
    for (int s = 0; s < 4; ++s) {
      std::vector<std::int32_t> x(12);
      for (auto& v : x) v = tok(rng);
      std::vector<std::int32_t> sample = x;
      sample.push_back(5);
      sample.insert(sample.end(), x.begin(), x.end());
      for (std::size_t i = 0; i < sample.size(); ++i) {
        ids.push_back(sample[i]);
        labels.push_back(i > 12 ? sample[i] : -100);
        pos.push_back(static_cast<std::int32_t>(i));
      }
    }
    out.push_back(make_packed_row(ids, labels, pos));
  }
  return out;
}

}  // namespace

class TstGaLore : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  struct Reference {
    std::string dir;
    nlohmann::json hp;
    std::shared_ptr<const SafetensorsFile> file;
  };
  std::map<int, Reference> refs_;  // by update_proj_gap
  std::string ref_dir_;            // the reference in use (its model/ and reference files)
  nlohmann::json hp_;
  std::shared_ptr<const SafetensorsFile> ref_;

  // galore_reference.py with refreshes every `gap` steps.
  bool make_reference(int gap) {
    Reference r;
    r.dir = tmp_.path().toStdString() + "/gap" + std::to_string(gap);
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(ODYSSEY_PYTHON), {QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/galore_reference.py"),
                                             QString::fromStdString(r.dir), "--gap", QString::number(gap)});
    if (!p.waitForFinished(300000)) return false;
    const QByteArray out = p.readAll();
    if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
      qWarning("%s", out.constData());
      return false;
    }
    std::ifstream in(r.dir + "/reference.json");
    r.hp = nlohmann::json::parse(in);
    auto f = SafetensorsFile::open(r.dir + "/reference.safetensors");
    if (!f.ok()) return false;
    r.file = f.value;
    refs_[gap] = std::move(r);
    return true;
  }

  void use_reference(int gap) {
    ref_dir_ = refs_.at(gap).dir;
    hp_ = refs_.at(gap).hp;
    ref_ = refs_.at(gap).file;
  }

  torch::Tensor ref(const std::string& name) {
    auto t = ref_->load(name, torch::kFloat32);
    if (!t.ok()) qFatal("%s", format_all(t.diagnostics).c_str());
    return t.value;
  }

  // The reference model with the reference's initial parameters.
  CausalLM model() {
    auto loaded = load_causal_lm(ref_dir_ + "/model",
                                 DecoderOptions{torch::kFloat32, torch::kCPU, AttentionBackend::Auto, false, {}});
    if (!loaded.ok()) qFatal("%s", format_all(loaded.diagnostics).c_str());
    CausalLM lm = loaded.value.lm;
    torch::NoGradGuard no_grad;
    for (auto& p : lm->named_parameters(true)) p.value().copy_(ref("init." + p.key()));
    return lm;
  }

  StepOptions options(bool galore, bool quantized) {
    StepOptions o;
    o.adamw = {1e-3, 0.9, 0.95, 1e-8, 0.1};
    o.schedule.type = "constant";
    o.schedule.base_lr = 1e-3;
    o.schedule.total_steps = 1000;
    o.max_grad_norm = 0;
    o.galore.enabled = galore;
    o.galore.quantized = quantized;
    o.galore.rank = 8;
    o.galore.update_proj_gap = 2;
    o.galore.scale = 0.25;
    o.galore.proj_group_size = 64;
    o.galore.state_block = 64;
    return o;
  }

 private Q_SLOTS:
  void initTestCase() {
    torch::set_num_threads(1);
    QVERIFY(tmp_.isValid());
    QVERIFY(make_reference(100));  // one SVD, at the first step
    QVERIFY(make_reference(2));    // refreshes at steps 1, 3 and 5
    use_reference(100);
  }

  void projectorAtFullRankIsExact() {
    torch::manual_seed(3);
    for (auto shape : {std::vector<std::int64_t>{48, 16}, {16, 48}, {32, 32}}) {
      const torch::Tensor g = torch::randn(shape);
      GaLoreProjector p(shape, 1000, false, 4, 256);
      QCOMPARE(p.rank(), std::min(shape[0], shape[1]));
      p.refresh(g);
      const double e = rel_err(p.project_back(p.project(g)), g);
      qInfo("P Pt G vs G, %ldx%ld (%s side): max rel err %.3g", static_cast<long>(shape[0]),
            static_cast<long>(shape[1]), p.side() == GaLoreProjector::Side::Right ? "right" : "left", e);
      QVERIFY(e < 1e-5);
    }
  }

  void randomizedSvdFindsTheSubspace() {
    // A gradient-like matrix: singular values falling as a power law, plus noise.
    torch::manual_seed(6);
    const std::int64_t m = 1536, n = 512, r = 32;
    const torch::Tensor u = std::get<0>(torch::linalg_qr(torch::randn({m, n})));
    const torch::Tensor v = std::get<0>(torch::linalg_qr(torch::randn({n, n})));
    const torch::Tensor s = torch::pow(torch::arange(1, n + 1, torch::kFloat32), -1.0);
    const torch::Tensor g = torch::matmul(u * s, v.t()) + 1e-4 * torch::randn({m, n});
    GaLoreProjector exact({m, n}, r, false, 4, 256), fast({m, n}, r, false, 4, 256, /*exact_svd_max_side=*/256);
    exact.refresh(g);
    fast.refresh(g, 1);
    const double kept = (exact.project(g).norm() / g.norm()).item<double>();
    const double kept_fast = (fast.project(g).norm() / g.norm()).item<double>();
    // The cosines of the principal angles between the two subspaces: singular values of P1 P2ᵀ.
    const torch::Tensor cosines = torch::linalg_svdvals(torch::matmul(exact.matrix(), fast.matrix().t()));
    qInfo(
        "randomized vs exact SVD, %ldx%ld rank %ld: share of ||G|| kept %.5f vs %.5f; smallest principal-angle "
        "cosine %.4f, mean %.4f",
        static_cast<long>(m), static_cast<long>(n), static_cast<long>(r), kept_fast, kept, cosines.min().item<double>(),
        cosines.mean().item<double>());
    QVERIFY(kept_fast >= 0.999 * kept);
    // The same seed gives the same projection (every rank, and after a resume).
    GaLoreProjector again({m, n}, r, false, 4, 256, 256);
    again.refresh(g, 1);
    QVERIFY(again.matrix().equal(fast.matrix()));
  }

  void int4ProjectionWithinBound() {
    // A real projection: the top 64 left singular vectors of a 3584 x 512 gradient-like matrix.
    torch::manual_seed(4);
    const torch::Tensor g = torch::randn({512, 3584}) * torch::linspace(0.1, 3, 3584);
    GaLoreProjector exact({512, 3584}, 64, false, 4, 256), quant({512, 3584}, 64, true, 4, 256);
    exact.refresh(g);
    quant.refresh(g);
    const torch::Tensor p = exact.matrix(), pq = quant.matrix();
    const GroupQuantized q = quantize_groupwise(p, 4, 256);
    const torch::Tensor err = (dequantize_groupwise(q) - p).abs().reshape({-1});
    const std::int64_t n = err.numel(), groups = q.scale.numel();
    torch::Tensor bound = q.scale.repeat_interleave(256).narrow(0, 0, n) / 2;
    const double worst = (err / bound).max().item<double>();
    const double frob = ((pq - p).norm() / p.norm()).item<double>();
    qInfo(
        "int4 projection 512x64, %ld groups of 256: worst error / bound (s/2) = %.4f; "
        "relative Frobenius error %.4f; %ld bytes vs %ld fp32",
        static_cast<long>(groups), worst, frob, static_cast<long>(q.nbytes()), static_cast<long>(p.nbytes()));
    QVERIFY(worst <= 1.0 + 1e-4);
    QCOMPARE(pq.sizes(), p.sizes());
    // The quantized projection still projects: the captured share of G's energy is close.
    const double kept = (exact.project(g).norm() / g.norm()).item<double>();
    const double kept_q = (quant.project(g).norm() / g.norm()).item<double>();
    qInfo("share of ||G|| kept by the projection: fp32 %.4f, int4 %.4f", kept, kept_q);
    QVERIFY(std::abs(kept - kept_q) < 0.05 * kept);
  }

  void eightBitMomentsWithinHalfAStep() {
    torch::manual_seed(5);
    // Values spanning 10 orders of magnitude, signed (first moment) and squared (second).
    const torch::Tensor x = torch::randn({4096}) * torch::pow(10.0, torch::rand({4096}) * -10.0);
    for (bool is_signed : {true, false}) {
      const torch::Tensor v = is_signed ? x : x * x;
      const BlockQuantized q = quantize_blockwise(v, is_signed, 256);
      const torch::Tensor back = dequantize_blockwise(q);
      const torch::Tensor book = moment_codebook(is_signed, torch::kCPU);
      const double smallest_normal = is_signed ? std::ldexp(1.0, 1 - 7) / (1.875 * std::ldexp(1.0, 15 - 7))
                                               : std::ldexp(1.0, 1 - 15) / (1.875 * std::ldexp(1.0, 31 - 15));
      const torch::Tensor absmax = q.absmax.repeat_interleave(256);
      const torch::Tensor norm = v.abs() / absmax;
      const torch::Tensor err = (back - v).abs();
      // Normal range: half a mantissa step (2^-4 relative); below it: half the subnormal step.
      const torch::Tensor allowed =
          torch::where(norm >= smallest_normal, v.abs() * (1.0 / 16), absmax * (smallest_normal / 8) / 2) * (1 + 1e-5);
      const double worst = (err / allowed).max().item<double>();
      qInfo("8-bit %s moments: worst error / allowed = %.4f; %ld bytes for %ld values",
            is_signed ? "signed" : "unsigned", worst, static_cast<long>(q.nbytes()), static_cast<long>(v.numel()));
      QVERIFY(worst <= 1.0);
      QCOMPARE(book.numel(), std::int64_t{256});
      QVERIFY(std::get<0>(book.sort()).equal(book));
    }
  }

  void matchesGaLoreTorch_data() {
    QTest::addColumn<int>("gap");
    QTest::newRow("one projection") << 100;
    QTest::newRow("refresh every 2 steps") << 2;
  }

  // Weights are compared while the projection is the first one. A refresh carries the moments,
  // made in the old basis, into the new one; singular vectors are defined up to sign, and
  // LAPACK may pick other signs for gradients that differ in their last bits, so after a
  // refresh only the losses (1e-5) and the new projections (up to sign, 1e-2) must agree.
  // k_proj.bias is not compared: softmax is invariant to it, its true gradient is zero, and
  // Adam normalises the rounding noise that stands in for it to steps of ±lr in either code.
  void matchesGaLoreTorch() {
    QFETCH(int, gap);
    use_reference(gap);
    CausalLM lm = model();
    StepOptions o = options(true, false);
    o.galore.rank = hp_.at("rank").get<std::int64_t>();
    o.galore.update_proj_gap = hp_.at("update_proj_gap").get<std::int64_t>();
    o.galore.scale = hp_.at("scale").get<double>();
    StepEngine engine(lm, o);
    auto* opt = dynamic_cast<GaLoreAdamW*>(&engine.optimizer());
    QVERIFY(opt);
    QCOMPARE(opt->targeted_count(), hp_.at("targeted").size());
    const auto steps = hp_.at("steps").get<std::int64_t>();
    double worst_loss = 0;
    for (std::int64_t k = 0; k < steps; ++k) {
      const std::string b = "batch." + std::to_string(k) + ".";
      const PackedRow row = make_packed_row(ref(b + "input_ids").to(torch::kInt64), ref(b + "labels").to(torch::kInt64),
                                            ref(b + "position_ids").to(torch::kInt64));
      const StepResult r = engine.step({row});
      const double want = hp_.at("losses")[static_cast<std::size_t>(k)].get<double>();
      worst_loss = std::max(worst_loss, std::abs(r.loss - want) / std::abs(want));
    }
    double worst_param = 0, worst_proj = 0;
    std::string worst_name;
    for (auto& p : lm->named_parameters(true)) {
      if (p.key().find("k_proj.bias") != std::string::npos) continue;
      const double e = rel_err(p.value(), ref("final." + p.key()));
      if (e > worst_param) worst_param = e, worst_name = p.key();
    }
    for (const auto& name : hp_.at("targeted")) {
      const GaLoreProjector* pr = opt->projector(name.get<std::string>());
      QVERIFY(pr);
      const torch::Tensor mine = pr->matrix(), theirs = ref("proj." + name.get<std::string>());
      QCOMPARE(mine.sizes(), theirs.sizes());
      // Singular vectors are defined up to sign: compare |⟨mine_i, theirs_i⟩| with 1.
      const bool right = pr->side() == GaLoreProjector::Side::Right;
      const torch::Tensor dots = right ? (mine * theirs).sum(1) : (mine * theirs).sum(0);
      worst_proj = std::max(worst_proj, (dots.abs() - 1).abs().max().item<double>());
    }
    qInfo(
        "GaLore vs galore-torch over %ld steps (rank %ld, gap %ld, %ld SVDs): loss max rel %.3g, "
        "final weights max rel %.3g (%s), projections |<p_i, q_i>| - 1 max %.3g",
        static_cast<long>(steps), static_cast<long>(o.galore.rank), static_cast<long>(o.galore.update_proj_gap),
        static_cast<long>(opt->svd_count()), worst_loss, worst_param, worst_name.c_str(), worst_proj);
    // With one projection the runs agree to rounding. Refreshing every 2 steps takes 42 SVDs of
    // gradients whose rank-8 cut falls between close singular values: the two libraries'
    // subspaces then differ by up to ~3e-3 on some CPUs (2.7e-3 measured on this project's CI
    // machine, an Intel Xeon, where the loss differed by 2.4e-5 relative; the same code
    // passed 1e-5 on the earlier one), so that case is held to 1e-4.
    QVERIFY(worst_loss < (gap >= steps ? 1e-5 : 1e-4));
    if (gap >= steps) {
      QVERIFY(worst_param < 1e-5);
      QVERIFY(worst_proj < 1e-4);
    } else {
      QVERIFY(worst_proj < 1e-2);  // SVDs of gradients of weights that differ in the 3rd digit
    }
  }

  void convergesNearAdamW() {
    // The documented margin (docs/optimizers.md): after 150 steps on the copy task, the mean
    // loss of the last 10 steps of GaLore (rank 16 of 64) and Q-GaLore must have covered at
    // least 80% of AdamW's drop from the initial loss.
    const auto rows = copy_task(150, 11);
    std::map<std::string, std::pair<double, double>> result;  // first loss, last-10 mean
    for (const std::string which : {"adamw", "galore", "q-galore"}) {
      CausalLM lm = model();
      StepOptions o = options(which != "adamw", which == "q-galore");
      o.adamw.lr = 3e-3;
      o.schedule.base_lr = 3e-3;
      o.galore.rank = 16;
      o.galore.update_proj_gap = 20;
      o.galore.scale = 1.0;
      o.max_grad_norm = 1.0;
      StepEngine engine(lm, o);
      double first = 0, tail = 0;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const StepResult r = engine.step({rows[i]});
        if (i == 0) first = r.loss;
        if (i + 10 >= rows.size()) tail += r.loss / 10;
      }
      result[which] = {first, tail};
      qInfo("%-8s: first loss %.4f, mean of the last 10 steps %.4f", which.c_str(), first, tail);
    }
    const double drop = result["adamw"].first - result["adamw"].second;
    QVERIFY(drop > 1.0);
    for (const char* w : {"galore", "q-galore"}) {
      const double covered = (result[w].first - result[w].second) / drop;
      qInfo("%s covered %.1f%% of AdamW's loss drop", w, 100 * covered);
      QVERIFY(covered >= 0.8);
    }
  }

  void lazySubspaceRuleGrowsTheGap() {
    const auto rows = copy_task(9, 12);
    const std::string name = "model.layers.0.mlp.gate_proj.weight";
    for (double threshold : {-1.0, 2.0}) {  // always similar enough / never
      CausalLM lm = model();
      StepOptions o = options(true, true);
      o.galore.update_proj_gap = 1;
      o.galore.queue_size = 2;
      o.galore.cos_threshold = threshold;
      StepEngine engine(lm, o);
      auto* opt = dynamic_cast<GaLoreAdamW*>(&engine.optimizer());
      std::vector<std::int64_t> gaps;
      for (const auto& r : rows) {
        engine.step({r});
        gaps.push_back(opt->update_proj_gap(name));
      }
      // Threshold -1: refreshes at steps 0, 1 (queue 1), 2 (queue full: gap 2), 4 (gap 4), 8 (gap 8).
      const std::vector<std::int64_t> want =
          threshold < 0 ? std::vector<std::int64_t>{1, 1, 2, 2, 4, 4, 4, 4, 8} : std::vector<std::int64_t>(9, 1);
      QCOMPARE(gaps, want);
      qInfo("cos_threshold %.0f: %ld SVDs in 9 steps per weight", threshold,
            static_cast<long>(opt->svd_count() / static_cast<std::int64_t>(opt->targeted_count())));
    }
  }

  void stateRoundTripResumesExactly() {
    const auto rows = copy_task(6, 13);
    for (bool quantized : {false, true}) {
      CausalLM a = model();
      StepEngine ea(a, options(true, quantized));
      for (const auto& r : rows) ea.step({r});

      CausalLM b = model();
      StepEngine eb(b, options(true, quantized));
      for (int i = 0; i < 3; ++i) eb.step({rows[static_cast<std::size_t>(i)]});
      const NamedTensors saved = eb.optimizer().state();
      CausalLM c = model();
      {
        torch::NoGradGuard no_grad;
        auto pb = b->named_parameters(true);
        for (auto& p : c->named_parameters(true)) p.value().copy_(pb[p.key()]);
      }
      StepEngine ec(c, options(true, quantized));
      const Diagnostics d = ec.optimizer().load_state(saved, "optimizer.safetensors");
      QVERIFY2(!has_errors(d), format_all(d).c_str());
      ec.set_completed_steps(3);
      for (std::size_t i = 3; i < rows.size(); ++i) ec.step({rows[i]});
      double worst = 0;
      auto pa = a->named_parameters(true);
      for (auto& p : c->named_parameters(true)) worst = std::max(worst, rel_err(p.value(), pa[p.key()]));
      qInfo("%s: resumed after 3 of 6 steps vs uninterrupted: max rel diff %.3g", quantized ? "Q-GaLore" : "GaLore",
            worst);
      QCOMPARE(worst, 0.0);

      // A state of the other kind is refused, naming the key.
      StepEngine other(model(), options(true, !quantized));
      const Diagnostics bad = other.optimizer().load_state(saved, "optimizer.safetensors");
      QVERIFY(has_errors(bad));
      QVERIFY2(format_all(bad).find("optimizer.safetensors") != std::string::npos, format_all(bad).c_str());
    }
  }

  void rankLargerThanAWeightIsRefused() {
    StepOptions o = options(true, false);
    o.galore.rank = 40;  // k_proj and v_proj are 32 x 64
    try {
      StepEngine e(model(), o);
      QFAIL("expected an error");
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      qInfo("%s", m.c_str());
      QVERIFY(m.find("galore_rank") != std::string::npos);
      QVERIFY(m.find("k_proj") != std::string::npos);
      QVERIFY(m.find("32") != std::string::npos);
    }
  }
};

QTEST_APPLESS_MAIN(TstGaLore)
#include "tst_galore.moc"
