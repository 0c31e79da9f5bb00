// The parallel pieces in real processes (docs/parallel.md): this test launches itself as N
// ranks through the engine's launcher (store transport, CPU) and each rank checks
//   - the collectives against values every rank can compute alone, and their counters;
//   - Ulysses, ring and hybrid attention against one process's attention over the whole row:
//     packed samples whose lengths need padding, and one sample followed by padding (Ulysses
//     then runs plain causal SDPA, the cuDNN path on GPUs), KV heads more than, equal to and
//     fewer than the Ulysses degree; outputs and the gradients of Q, K and V within 1e-5 (fp32), and
//     exactly zero gradient on padding (padded keys are masked);
//   - the layout: every token on exactly one rank, zigzag chunks, padding multiples;
// and a rank that dies makes the launcher stop the other and report the rank.
#include "dist/comm.h"
#include "dist/launcher.h"
#include "dist/mesh.h"
#include "dist/sequence_parallel.h"
#include "model/attention.h"
#include "run/run_lock.h"
#include "train/batch.h"

#include <QtTest>

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

using namespace odyssey;

namespace {

// ---- worker side ----------------------------------------------------------------------------

struct Case {
  int ulysses = 1, ring = 1;
  std::int64_t q_heads = 4, kv_heads = 2;
  bool one_sample = false;  // "...s1": the row is one sample (plain causal attention after the all-to-all)
  std::int64_t window = 0;  // "...w5": sliding window (attend_masked)
  double softcap = 0.0;     // "...c1.5": attention-logit soft-capping (attend_masked)
};

Case parse_case(const std::string& s) {
  Case c;
  std::sscanf(s.c_str(), "u%dr%dq%ldkv%ld", &c.ulysses, &c.ring, &c.q_heads, &c.kv_heads);
  c.one_sample = s.find("s1") != std::string::npos;
  if (auto w = s.find('w'); w != std::string::npos) c.window = std::atol(s.c_str() + w + 1);
  if (auto x = s.find('c'); x != std::string::npos) c.softcap = std::atof(s.c_str() + x + 1);
  return c;
}

dist::Mesh worker_mesh(const dist::DistEnv& env, int ulysses, int ring) {
  ParallelLayout layout;
  layout.world_size = env.world;
  layout.sp = ulysses * ring;
  layout.ulysses = ulysses;
  layout.ring = ring;
  layout.dp = env.world / layout.sp;
  const auto store = dist::connect_store(env, std::chrono::seconds(60));
  return dist::build_mesh(env, layout, dist::Transport::Store, store, torch::kCPU, std::chrono::seconds(60));
}

int attention_worker(const dist::DistEnv& env, const Case& c) {
  dist::Mesh mesh = worker_mesh(env, c.ulysses, c.ring);
  const std::vector<std::int64_t> lengths =
      c.one_sample ? std::vector<std::int64_t>{49} : std::vector<std::int64_t>{7, 13, 1, 22, 6};  // 49: every split pads
  std::int64_t t = 0;
  std::vector<std::int32_t> ids, pos;
  for (auto n : lengths)
    for (std::int64_t i = 0; i < n; ++i) {
      ids.push_back(static_cast<std::int32_t>(t++));
      pos.push_back(static_cast<std::int32_t>(i));
    }
  const std::int64_t d = 8;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  torch::manual_seed(7);  // the same tensors on every rank
  const torch::Tensor q = torch::randn({t, c.q_heads, d}), k = torch::randn({t, c.kv_heads, d}),
                      v = torch::randn({t, c.kv_heads, d}), w = torch::randn({t, c.q_heads, d});
  const torch::Tensor pad_noise = torch::randn({t, std::max(c.q_heads, c.kv_heads), d}) * 3;

  // One process over the whole row.
  const train::PackedRow whole = train::make_packed_row(ids, std::vector<std::int32_t>(ids.size(), 0), pos);
  torch::Tensor qr = q.clone().requires_grad_(true), kr = k.clone().requires_grad_(true), vr = v.clone().requires_grad_(true);
  const bool masked = c.window > 0 || c.softcap > 0;
  torch::Tensor ref;
  if (masked) {  // the single-process path of the decoder for windowed / soft-capped layers
    torch::Tensor keep = model::block_causal_mask(whole.cu_seqlens, t, torch::kCPU);
    if (c.window > 0) keep = model::window_mask(keep, t, c.window, torch::kCPU);
    ref = model::masked_attention(qr.transpose(0, 1).unsqueeze(0), kr.transpose(0, 1).unsqueeze(0),
                                  vr.transpose(0, 1).unsqueeze(0), keep, scale, c.softcap, model::AttentionBackend::Auto,
                                  nullptr)
              .squeeze(0)
              .transpose(0, 1);
  } else {
    ref = model::varlen_causal_attention(qr, kr, vr, whole.cu_seqlens, whole.max_seqlen, scale, nullptr);
  }
  (ref * w).sum().backward();

  // This rank's shard: input_ids carry the global token index, -1 for padding.
  const train::PackedRow shard = dist::shard_row(whole, mesh.ulysses_group.get(), mesh.ring_group.get(), -1);
  const torch::Tensor idx = shard.input_ids[0];
  const torch::Tensor valid = idx.ge(0), safe = idx.clamp_min(0);
  const auto n = idx.size(0);
  auto local = [&](const torch::Tensor& full) {
    // Padding rows hold noise: if a real query attended a padded key, the output would show it.
    const torch::Tensor noise = pad_noise.narrow(1, 0, full.size(1)).narrow(0, 0, n);
    return torch::where(valid.view({n, 1, 1}), full.index_select(0, safe), noise).clone().requires_grad_(true);
  };
  torch::Tensor ql = local(q), kl = local(k), vl = local(v);
  const torch::Tensor out =
      masked ? shard.attention->attend_masked(ql, kl, vl, scale, c.window, c.softcap, model::AttentionBackend::Auto, nullptr)
             : shard.attention->attend(ql, kl, vl, scale, model::AttentionBackend::Auto, nullptr, nullptr);
  (out * torch::where(valid.view({n, 1, 1}), w.index_select(0, safe), torch::zeros({})).detach()).sum().backward();

  auto err = [&](const torch::Tensor& got, const torch::Tensor& want) {
    const torch::Tensor g = got.index({valid}), r = want.index_select(0, safe.index({valid}));
    return (g - r).abs().max().item<double>() / std::max(1e-12, r.abs().max().item<double>());
  };
  const double e_out = err(out, ref), e_q = err(ql.grad(), qr.grad()), e_k = err(kl.grad(), kr.grad()),
               e_v = err(vl.grad(), vr.grad());
  const torch::Tensor pad = valid.logical_not();
  const double pad_grad = pad.any().item<bool>()
                              ? std::max({ql.grad().index({pad}).abs().max().item<double>(),
                                          kl.grad().index({pad}).abs().max().item<double>(),
                                          vl.grad().index({pad}).abs().max().item<double>()})
                              : 0.0;
  // Every real token is on exactly one rank of the sp group.
  torch::Tensor count = torch::zeros({t}, torch::kFloat64);
  count.index_add_(0, safe.index({valid}), torch::ones({valid.sum().item<std::int64_t>()}, torch::kFloat64));
  mesh.world_group->all_reduce(count);
  const bool covered = count.eq(1.0).all().item<bool>();
  std::printf("{\"rank\": %d, \"case\": \"ulysses %d x ring %d, %ld q heads, %ld kv heads%s, window %ld, softcap %g\", \"local_tokens\": %ld, "
              "\"padding\": %ld, \"out\": %.3g, \"dq\": %.3g, \"dk\": %.3g, \"dv\": %.3g, \"padding_grad\": %.3g, "
              "\"covered\": %s}\n",
              env.rank, c.ulysses, c.ring, static_cast<long>(c.q_heads), static_cast<long>(c.kv_heads),
              c.one_sample ? ", one sample" : "", static_cast<long>(c.window), c.softcap, static_cast<long>(n), static_cast<long>(pad.sum().item<std::int64_t>()), e_out, e_q, e_k, e_v, pad_grad,
              covered ? "true" : "false");
  std::fflush(stdout);
  const bool ok = e_out < 1e-5 && e_q < 1e-5 && e_k < 1e-5 && e_v < 1e-5 && pad_grad == 0.0 && covered;
  return ok ? 0 : 1;
}

int collectives_worker(const dist::DistEnv& env) {
  dist::Mesh mesh = worker_mesh(env, env.world, 1);
  dist::Group& g = *mesh.world_group;
  const int n = g.size(), r = g.rank();
  bool ok = true;
  auto expect = [&](bool cond, const char* what) {
    if (!cond) std::printf("rank %d: %s wrong\n", r, what);
    ok = ok && cond;
  };
  torch::Tensor a = torch::full({5}, static_cast<double>(r + 1), torch::kFloat64);
  g.all_reduce(a);
  expect(a.eq(n * (n + 1) / 2.0).all().item<bool>(), "all_reduce");
  // all_to_all: rank r sends 100 r + j to rank j; receives 100 j + r from rank j.
  torch::Tensor x = torch::arange(n, torch::kFloat32) + 100.0f * static_cast<float>(r);
  torch::Tensor y = g.all_to_all(x.view({n, 1}));
  expect(y.view({n}).equal(torch::arange(n, torch::kFloat32) * 100.0f + static_cast<float>(r)), "all_to_all");
  torch::Tensor gathered = g.all_gather(torch::full({2}, static_cast<std::int64_t>(r), torch::kInt64));
  expect(gathered.equal(torch::arange(n, torch::kInt64).repeat_interleave(2)), "all_gather");
  torch::Tensor rs = g.reduce_scatter(torch::arange(2 * n, torch::kFloat64));
  expect(rs.equal(torch::tensor({2.0 * r, 2.0 * r + 1}, torch::kFloat64) * n), "reduce_scatter");
  torch::Tensor ring = g.send_recv(torch::full({3}, static_cast<float>(r)), (r + 1) % n, (r - 1 + n) % n);
  expect(ring.eq(static_cast<float>((r - 1 + n) % n)).all().item<bool>(), "send_recv");
  g.barrier();
  const auto st = g.stats();
  expect(st[static_cast<int>(dist::Op::AllReduce)].calls == 1 && st[static_cast<int>(dist::Op::AllReduce)].bytes == 40,
         "all_reduce counters");
  expect(st[static_cast<int>(dist::Op::AllToAll)].bytes == 4 * n, "all_to_all counters");
  expect(st[static_cast<int>(dist::Op::Barrier)].calls == 1, "barrier counter");
  // A rank that calls first waits inside the collective for the last one: take_stats's
  // transfer time (per call, the least over the ranks) leaves that wait out.
  mesh.take_stats(nullptr);
  if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  torch::Tensor late = torch::ones({4});
  g.all_reduce(late);
  std::vector<double> transfer;
  const auto coll = mesh.take_stats(nullptr, &transfer);
  expect(coll.size() == 1 && transfer.size() == 1 && coll[0].op == "all_reduce" && coll[0].calls == 1,
         "stats after a late rank");
  if (!coll.empty() && !transfer.empty()) {
    if (r == 0) expect(coll[0].time_s >= 0.3, "the early rank's time (it waited)");
    expect(transfer[0] > 0 && transfer[0] < 0.2 && transfer[0] <= coll[0].time_s, "the transfer time");
  }
  std::printf("{\"rank\": %d, \"collectives\": %s}\n", r, ok ? "\"ok\"" : "\"wrong\"");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

int die_worker(const dist::DistEnv& env) {
  dist::Mesh mesh = worker_mesh(env, env.world, 1);
  if (env.rank == 1) std::_Exit(3);  // gone before the collective
  torch::Tensor a = torch::ones({1});
  mesh.world_group->all_reduce(a);  // waits for rank 1 until the launcher stops this rank
  return 0;
}

int worker_main(const std::string& what) {
  std::string error;
  const dist::DistEnv env = dist::read_dist_env(&error);
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  try {
    if (what == "collectives") return collectives_worker(env);
    if (what == "die") return die_worker(env);
    return attention_worker(env, parse_case(what));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", env.rank, e.what());
    return 1;
  }
}

// ---- test side ------------------------------------------------------------------------------

struct Launched {
  int code = -1;
  QString status_reason;
  int failed_rank = -2;
  double seconds = 0;
};

Launched launch_ranks(int n, const QString& what) {
  QTemporaryDir dir;
  dist::LaunchOptions o;
  o.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  o.arguments = {"--sp-worker", what.toStdString()};
  o.nproc = n;
  o.run_dir = dir.path().toStdString();
  o.rank_exit_grace_s = 10;
  // The launcher supervises a directory its caller owns (run_lock.h), as `odyssey-train run` does.
  const auto claim = run::claim_run_dir(run::RunDir(o.run_dir));
  if (!claim.ok()) qFatal("%s", format_all(claim.diagnostics).c_str());
  QElapsedTimer t;
  t.start();
  Launched l;
  l.code = dist::launch(o);
  l.seconds = static_cast<double>(t.elapsed()) / 1000.0;
  QFile f(dir.filePath("status.json"));
  if (f.open(QIODevice::ReadOnly)) {
    const QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    l.status_reason = s.value("reason").toString();
    l.failed_rank = s.value("failed_rank").toInt(-2);
  }
  return l;
}

}  // namespace

class TstSequenceParallel : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void layoutZigzagAndPadding() {
    // Samples 5 and 3 over ring 2 x ulysses 2: each padded to a multiple of 4, then a padding
    // sample to a multiple of lcm(4, 4) = 4.
    const dist::SpLayout L = dist::plan_sp_layout({0, 5, 8}, 8, 2, 2);
    QCOMPARE(L.padded, std::int64_t{12});  // 8 + 4
    QCOMPARE(L.shard_order.size(), std::size_t{2});
    // Sample 0 (padded to 8, chunks of 2): shard 0 has chunks 0 and 3, shard 1 chunks 1 and 2.
    const std::vector<std::int64_t> s0{0, 1, 6, 7, 8, 11}, s1{2, 3, 4, 5, 9, 10};
    QCOMPARE(L.shard_order[0], s0);
    QCOMPARE(L.shard_order[1], s1);
    QCOMPARE(L.source[5], std::int64_t{-1});  // padding continues sample 0
    QCOMPARE(L.position[5], std::int64_t{5});
    const dist::SpLayout U = dist::plan_sp_layout({0, 3, 7}, 7, 4, 1);
    QCOMPARE(U.padded, std::int64_t{8});
    QCOMPARE(U.cu_seqlens, (std::vector<std::int32_t>{0, 3, 7, 8}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, dist::plan_sp_layout({0, 3}, 7, 2, 1));
  }

  void headsThatFit() {
    std::string why;
    QVERIFY(dist::heads_fit_ulysses(28, 4, 2, &why));
    QVERIFY(dist::heads_fit_ulysses(28, 4, 4, &why));
    QVERIFY(dist::heads_fit_ulysses(32, 4, 8, &why));  // KV heads replicated
    QVERIFY(!dist::heads_fit_ulysses(14, 2, 4, &why));
    QVERIFY(why.find("14 attention heads") != std::string::npos);
    QVERIFY(!dist::heads_fit_ulysses(12, 6, 4, &why));
  }

  void collectives_data() {
    QTest::addColumn<int>("ranks");
    QTest::newRow("2 ranks") << 2;
    QTest::newRow("4 ranks") << 4;
  }
  void collectives() {
    QFETCH(int, ranks);
    const Launched l = launch_ranks(ranks, "collectives");
    QCOMPARE(l.code, 0);
  }

  void attention_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QString>("spec");
    QTest::newRow("Ulysses 2, KV 4 > degree") << 2 << "u2r1q4kv4";
    QTest::newRow("Ulysses 2, KV 2 = degree") << 2 << "u2r1q4kv2";
    QTest::newRow("Ulysses 2, KV 1 < degree (replicated)") << 2 << "u2r1q4kv1";
    QTest::newRow("Ulysses 2, one sample + padding") << 2 << "u2r1q4kv2s1";
    QTest::newRow("ring 2") << 2 << "u1r2q4kv2";
    QTest::newRow("Ulysses 2, sliding window 5") << 2 << "u2r1q4kv2w5";
    QTest::newRow("Ulysses 2, soft-capping 1.5") << 2 << "u2r1q4kv2c1.5";
    QTest::newRow("Ulysses 4, window 5 + soft-capping, KV 2 (replicated)") << 4 << "u4r1q8kv2w5c1.5";
    QTest::newRow("Ulysses 2, one sample + padding, window 9") << 2 << "u2r1q4kv2s1w9";
    QTest::newRow("Ulysses 4, KV 2 (replicated)") << 4 << "u4r1q8kv2";
    QTest::newRow("Ulysses 4, one sample + padding, KV 2 (replicated)") << 4 << "u4r1q8kv2s1";
    QTest::newRow("ring 4") << 4 << "u1r4q2kv1";
    QTest::newRow("Ulysses 2 x ring 2") << 4 << "u2r2q4kv2";
    QTest::newRow("Ulysses 2 x ring 2, KV 1 (replicated)") << 4 << "u2r2q4kv1";
    // Ring blocks masked by the window (whole blocks outside it skipped) and soft-capped.
    QTest::newRow("ring 2, sliding window 5") << 2 << "u1r2q4kv2w5";
    QTest::newRow("ring 2, soft-capping 1.5") << 2 << "u1r2q4kv2c1.5";
    QTest::newRow("ring 2, one sample + padding, window 9") << 2 << "u1r2q4kv2s1w9";
    QTest::newRow("ring 4, window 5 + soft-capping, KV 1") << 4 << "u1r4q2kv1w5c1.5";
    QTest::newRow("Ulysses 2 x ring 2, window 5 + soft-capping") << 4 << "u2r2q4kv2w5c1.5";
  }
  void attention() {
    QFETCH(int, ranks);
    QFETCH(QString, spec);
    const Launched l = launch_ranks(ranks, spec);
    QCOMPARE(l.code, 0);
  }

  void deadRankStopsTheOthers() {
    const Launched l = launch_ranks(2, "die");
    qInfo("rank 1 exited with code 3: the launcher returned after %.2f s", l.seconds);
    QCOMPARE(l.code, 1);
    QCOMPARE(l.failed_rank, 1);
    QVERIFY2(l.status_reason.contains("exit code 3"), qPrintable(l.status_reason));
    QVERIFY(l.seconds < 20);
  }
};

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--sp-worker") return worker_main(argv[2]);
  TstSequenceParallel t;
  return QTest::qExec(&t, argc, argv);
}
#include "tst_sequence_parallel.moc"
