// ZeRO-1/2 AdamW (train/zero.h) against unsharded AdamW, in real processes: this test
// launches itself as N ranks through the engine's launcher (store transport, CPU). Each rank
// trains a tiny random Qwen2 (fp32) on its own packed rows for 4 optimizer steps of 2
// micro-batches (weight decay 0.1 on decaying parameters, clipping at 1.0 that clips; 1, 2
// and 4 ranks, one rank being ZeRO-Offload on one process) with
//   - the reference: StepEngine + AdamW + set_world (gradients all-reduced: the same sums);
//   - ZeRO-2, ZeRO-2 + offload and ZeRO-1 through StepEngine (one bucket), and ZeRO-2,
//     ZeRO-2 + offload, ZeRO-1 and ZeRO-1 + offload with 1000-element buckets (25 buckets,
//     parameters split across buckets) driven the way StepEngine drives an optimizer;
// and every rank checks its final parameters against the reference's (max abs diff <= 1e-6;
// ZeRO-1's gradients are the reference's exactly, ZeRO-2 adds micro-batches in another
// order), offload against no offload (equal), and that stage 2 leaves no .grad after any
// micro-batch; bf16 parameters (fp32 masters) only run close to the fp32 reference. A
// checkpoint round trip (2 steps, state() through a safetensors file, a new optimizer,
// load_state, 2 more steps) equals 4 uninterrupted steps exactly. In-process, with groups
// that never communicate: the layout (every element on exactly one rank), load_state's
// refusals (another world size, rank, bucket size or parameter set) and bad input.
#include "dist/comm.h"
#include "dist/launcher.h"
#include "dist/mesh.h"
#include "model/decoder.h"
#include "model/safetensors.h"
#include "run/run_lock.h"
#include "train/batch.h"
#include "train/optim.h"
#include "train/step_engine.h"
#include "train/zero.h"

#include <QtTest>

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>

#include <unistd.h>

using namespace odyssey;

namespace {

constexpr int kSteps = 4, kAccum = 2;
constexpr std::int64_t kSmallBucket = 1000;
constexpr double kTolerance = 1e-6;

// A tiny Qwen2: q/v biases and norms (no decay) between the decaying weights; every process
// builds the same one from the seed. initializer_range 0.2 makes the first gradients large
// enough for clipping at 1.0 to act. k_proj.bias is frozen: its true gradient is zero (a
// shift of every key score of a query, which softmax ignores), so its computed gradient is
// rounding noise of about eps, which Adam's g / (|g| + eps) turns into updates of lr's order
// that depend on the summation order: comparing them measures noise, not the optimizer.
model::CausalLM tiny_model(torch::Dtype dtype = torch::kFloat32) {
  auto c = parse_decoder_config(
      R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
          "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 97, "max_position_embeddings": 256,
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false,
          "initializer_range": 0.2})",
      "tiny/config.json");
  if (!c.ok()) throw std::runtime_error(format_all(c.diagnostics));
  torch::manual_seed(5);
  model::CausalLM lm(c.value,
                     model::DecoderOptions{torch::kFloat32, torch::kCPU, model::AttentionBackend::Auto, false, {}});
  lm->initialize_random();
  if (dtype != torch::kFloat32) {
    model::CausalLM cast(c.value, model::DecoderOptions{dtype, torch::kCPU, model::AttentionBackend::Auto, false, {}});
    torch::NoGradGuard no_grad;
    auto from = lm->named_parameters(true);
    for (auto& p : cast->named_parameters(true)) p.value().copy_(from[p.key()]);
    lm = cast;
  }
  for (auto& p : lm->named_parameters(true))
    if (p.key().ends_with("k_proj.bias")) p.value().requires_grad_(false);
  return lm;
}

std::vector<train::NamedParam> trainable(model::CausalLM& lm) {
  std::vector<train::NamedParam> out;
  for (auto& p : lm->named_parameters(true))
    if (p.value().requires_grad()) out.push_back({p.key(), p.value(), train::decays(p.key())});
  return out;
}

// Rank `rank`'s micro-batches of every step: one packed row of 2 or 3 samples each.
std::vector<std::vector<train::PackedRow>> rank_batches(int rank) {
  std::vector<std::vector<train::PackedRow>> steps(kSteps);
  for (int s = 0; s < kSteps; ++s)
    for (int m = 0; m < kAccum; ++m) {
      std::mt19937 rng(static_cast<unsigned>(1000 * rank + 10 * s + m + 1));
      std::vector<std::int32_t> ids, labels, pos;
      const int samples = 2 + static_cast<int>(rng() % 2);
      for (int k = 0; k < samples; ++k) {
        const int len = 5 + static_cast<int>(rng() % 10), prompt = 1 + static_cast<int>(rng() % 3);
        for (int i = 0; i < len; ++i) {
          const auto id = static_cast<std::int32_t>(3 + rng() % 94);
          ids.push_back(id);
          labels.push_back(i < prompt ? -100 : id);
          pos.push_back(i);
        }
      }
      steps[static_cast<std::size_t>(s)].push_back(train::make_packed_row(ids, labels, pos));
    }
  return steps;
}

train::StepOptions step_options() {
  train::StepOptions o;
  o.adamw.lr = 1e-3;
  o.adamw.beta1 = 0.9;
  o.adamw.beta2 = 0.95;
  o.adamw.eps = 1e-8;
  o.adamw.weight_decay = 0.1;
  o.schedule.type = "cosine";
  o.schedule.base_lr = o.adamw.lr;
  o.schedule.warmup_steps = 0;
  o.schedule.total_steps = 6;
  o.max_grad_norm = 1.0;
  return o;
}

using Params = std::vector<std::pair<std::string, torch::Tensor>>;

Params snapshot(model::CausalLM& lm) {
  Params out;
  for (auto& p : lm->named_parameters(true)) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

// The largest absolute difference over all parameters, and where it is.
struct Diff {
  double max = 0;
  std::string where;
};
Diff max_diff(const Params& a, const Params& b) {
  Diff d;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = (a[i].second.to(torch::kFloat64) - b[i].second.to(torch::kFloat64)).abs().max().item<double>();
    if (x > d.max || d.where.empty()) d = {x, a[i].first};
  }
  return d;
}

// One optimizer step the way StepEngine::step drives an optimizer (for optimizers built
// here, with small buckets); `grads_left` counts parameters holding a .grad after any
// micro-batch. Returns the gradient norm.
double drive_step(model::CausalLM& lm, train::Optimizer& opt, dist::Group& world,
                  const std::vector<train::PackedRow>& mbs, double lr, double max_norm, int* grads_left) {
  lm->train();
  std::int64_t targets = 0;
  for (const auto& mb : mbs) targets += mb.target_tokens();
  torch::Tensor t = torch::tensor({targets}, torch::kInt64);
  world.all_reduce(t);
  const double denom = static_cast<double>(std::max<std::int64_t>(1, t.item<std::int64_t>()));
  opt.begin_step();
  for (std::size_t i = 0; i < mbs.size(); ++i) {
    const torch::Tensor sum = train::row_loss_sum(lm, mbs[i]);
    if (sum.requires_grad()) (sum / denom).backward();
    opt.end_micro_batch(i + 1 == mbs.size());
    for (const auto& p : opt.params())
      if (p.param.grad().defined()) ++*grads_left;
  }
  opt.reduce_gradients(world);
  const double norm = opt.clip_grad_norm(max_norm);
  opt.step(lr);
  opt.zero_grad();
  return norm;
}

// ---- worker side ----------------------------------------------------------------------------

dist::Mesh worker_mesh(const dist::DistEnv& env) {
  ParallelLayout layout;
  layout.world_size = env.world;
  layout.dp = env.world;  // ZeRO shards over the world group whatever its dp x sp split
  const auto store = dist::connect_store(env, std::chrono::seconds(60));
  return dist::build_mesh(env, layout, dist::Transport::Store, store, torch::kCPU, std::chrono::seconds(60));
}

// The largest value of x over the group (every rank gets it).
double group_max(dist::Group& g, double x) {
  return g.all_gather(torch::tensor({x}, torch::kFloat64)).max().item<double>();
}

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.6g", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

int train_worker(const dist::DistEnv& env) {
  dist::Mesh mesh = worker_mesh(env);
  dist::Group& world = *mesh.world_group;
  const auto batches = rank_batches(env.rank);
  const train::StepOptions opts = step_options();
  bool ok = true;

  // The reference: unsharded AdamW, gradients all-reduced over the world.
  std::vector<double> ref_norms;
  Params ref;
  {
    train::StepEngine engine(tiny_model(), opts);
    engine.set_world(&world);
    for (const auto& b : batches) ref_norms.push_back(engine.step(b).grad_norm);
    ref = snapshot(engine.model());
  }
  const bool clipped = std::any_of(ref_norms.begin(), ref_norms.end(), [](double n) { return n > 1.0; });
  if (env.rank == 0)
    std::printf("{\"world\": %d, \"case\": \"adamw reference\", \"grad_norms\": %s, \"clipped\": %s}\n", env.world,
                json_list(ref_norms).c_str(), clipped ? "true" : "false");
  ok = ok && clipped;

  auto report = [&](const std::string& name, std::size_t buckets, const std::vector<double>& norms, const Diff& diff,
                    int grads_left, double tolerance) {
    const double worst = group_max(world, diff.max);
    double norm_err = 0;
    for (std::size_t i = 0; i < norms.size(); ++i)
      norm_err = std::max(norm_err, std::abs(norms[i] - ref_norms[i]) / ref_norms[i]);
    const bool good = worst <= tolerance && norm_err < 1e-5 && grads_left == 0;
    if (env.rank == 0)
      std::printf(
          "{\"world\": %d, \"case\": \"%s\", \"buckets\": %zu, \"grad_norms\": %s, \"norm_rel_err\": %.3g, "
          "\"grads_left\": %d, \"max_abs_diff\": %.3g, \"rank0_worst\": \"%s\", \"ok\": %s}\n",
          env.world, name.c_str(), buckets, json_list(norms).c_str(), norm_err, grads_left, worst, diff.where.c_str(),
          good ? "true" : "false");
    if (!good)
      std::fprintf(stderr, "rank %d: %s: max abs diff %.3g (%s), norm rel err %.3g, %d gradients left\n", env.rank,
                   name.c_str(), diff.max, diff.where.c_str(), norm_err, grads_left);
    ok = ok && good;
  };

  // Through StepEngine (make_optimizer's ZeroAdamW, default bucket size: one bucket). One
  // process takes ZeRO only with offload (ZeRO-Offload on one GPU), and its step engine never
  // asks the optimizer to reduce: stage 1 reduces when it clips.
  std::map<std::string, Params> results;
  // One process also takes stage 2 without offload as optimizer_dtype: fp32 asks for it
  // (fp32_master_only, named adamw_fp32_master); (0, false) stands for that case here.
  const auto engine_cases = env.world == 1 ? std::vector<std::pair<int, bool>>{{2, true}, {1, true}, {0, false}}
                                           : std::vector<std::pair<int, bool>>{{2, false}, {2, true}, {1, false}};
  for (const auto& [stage, offload] : engine_cases) {
    train::StepOptions o = opts;
    o.zero.stage = stage == 0 ? 2 : stage;
    o.zero.offload = offload;
    o.zero.fp32_master_only = stage == 0;
    train::StepEngine engine(tiny_model(), o, &world);
    std::vector<double> norms;
    for (const auto& b : batches) norms.push_back(engine.step(b).grad_norm);
    const auto* z = dynamic_cast<train::ZeroAdamW*>(&engine.optimizer());
    const std::string name = engine.optimizer().name() + (offload ? " offload" : "") + " (StepEngine)";
    ok = ok && (stage == 0) == (engine.optimizer().name() == "adamw_fp32_master");
    results[name] = snapshot(engine.model());
    report(name, z ? z->bucket_count() : 0, norms, max_diff(results[name], ref), 0, kTolerance);
  }

  // Small buckets, driven here.
  for (const auto& [stage, offload] : std::vector<std::pair<int, bool>>{{2, false}, {2, true}, {1, false}, {1, true}}) {
    model::CausalLM lm = tiny_model();
    train::ZeroAdamW z(trainable(lm), opts.adamw, world, stage, offload, kSmallBucket);
    std::vector<double> norms;
    int grads_left = 0, ignored = 0;  // stage 1 keeps .grad until reduce_gradients, by design
    for (int s = 0; s < kSteps; ++s)
      norms.push_back(drive_step(lm, z, world, batches[static_cast<std::size_t>(s)], opts.schedule.lr(s),
                                 opts.max_grad_norm, stage == 2 ? &grads_left : &ignored));
    const std::string name = z.name() + (offload ? " offload" : "") + " (1000-element buckets)";
    results[name] = snapshot(lm);
    report(name, z.bucket_count(), norms, max_diff(results[name], ref), grads_left, kTolerance);
    if (offload) {  // the same arithmetic through host buffers: the same parameters
      const double d = group_max(world, max_diff(results[name], results[z.name() + " (1000-element buckets)"]).max);
      if (env.rank == 0)
        std::printf("{\"world\": %d, \"case\": \"%s vs no offload\", \"max_abs_diff\": %.3g}\n", env.world,
                    name.c_str(), d);
      ok = ok && d == 0.0;
    }
  }

  // bf16 parameters: fp32 masters, bf16 collectives. Not the fp32 oracle: only close to it,
  // and offload equal to no offload.
  {
    std::vector<Params> got;
    for (const bool offload : {false, true}) {
      model::CausalLM lm = tiny_model(torch::kBFloat16);
      train::ZeroAdamW z(trainable(lm), opts.adamw, world, 2, offload, kSmallBucket);
      int grads_left = 0;
      for (int s = 0; s < kSteps; ++s)
        drive_step(lm, z, world, batches[static_cast<std::size_t>(s)], opts.schedule.lr(s), opts.max_grad_norm,
                   &grads_left);
      got.push_back(snapshot(lm));
      ok = ok && grads_left == 0 && got.back().front().second.scalar_type() == torch::kBFloat16;
    }
    const double vs_fp32 = group_max(world, max_diff(got[0], ref).max),
                 offload_diff = group_max(world, max_diff(got[0], got[1]).max);
    if (env.rank == 0)
      std::printf(
          "{\"world\": %d, \"case\": \"zero2_adamw bf16 (1000-element buckets)\", \"max_abs_diff_vs_fp32\": "
          "%.3g, \"offload_vs_no_offload\": %.3g}\n",
          env.world, vs_fp32, offload_diff);
    ok = ok && vs_fp32 < 2e-2 && offload_diff == 0.0;
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

// 2 steps, state(), a new optimizer over the same parameters, load_state, 2 more steps: the
// same parameters as 4 uninterrupted steps, exactly.
int resume_worker(const dist::DistEnv& env) {
  dist::Mesh mesh = worker_mesh(env);
  dist::Group& world = *mesh.world_group;
  const auto batches = rank_batches(env.rank);
  train::StepOptions opts = step_options();
  bool ok = true;
  for (const auto& [stage, offload] : std::vector<std::pair<int, bool>>{{2, false}, {1, true}}) {
    opts.zero.stage = stage;
    opts.zero.offload = offload;
    Params straight;
    {
      train::StepEngine engine(tiny_model(), opts, &world);
      for (const auto& b : batches) engine.step(b);
      straight = snapshot(engine.model());
    }
    auto first = std::make_unique<train::StepEngine>(tiny_model(), opts, &world);
    for (int s = 0; s < 2; ++s) first->step(batches[static_cast<std::size_t>(s)]);
    // Through a safetensors file, as checkpoints keep it (the layout is int64).
    const std::string file =
        (std::filesystem::temp_directory_path() / ("tst_zero." + std::to_string(::getpid()) + ".optimizer.safetensors"))
            .string();
    Diagnostics d = save_safetensors(file, first->optimizer().state()).diagnostics;
    train::NamedTensors loaded;
    auto opened = SafetensorsFile::open(file);
    d.insert(d.end(), opened.diagnostics.begin(), opened.diagnostics.end());
    if (opened.ok())
      for (const auto& n : opened.value->names()) {
        auto t = opened.value->load_as_stored(n);
        d.insert(d.end(), t.diagnostics.begin(), t.diagnostics.end());
        if (t.ok()) loaded.emplace_back(n, t.value);
      }
    std::filesystem::remove(file);
    // The second optimizer installs its hooks before the first one goes: the first must
    // leave them in place.
    train::StepEngine second(first->model(), opts, &world);
    first.reset();
    if (!has_errors(d)) d = second.optimizer().load_state(loaded, file);
    if (!d.empty()) {
      std::fprintf(stderr, "rank %d: %s", env.rank, format_all(d).c_str());
      ok = false;
    }
    second.set_completed_steps(2);
    for (int s = 2; s < kSteps; ++s) second.step(batches[static_cast<std::size_t>(s)]);
    const double diff = group_max(world, max_diff(snapshot(second.model()), straight).max);
    if (env.rank == 0)
      std::printf(
          "{\"world\": %d, \"case\": \"%s%s: 2 steps, save, load, 2 steps vs 4 steps\", \"max_abs_diff\": %.3g}\n",
          env.world, second.optimizer().name().c_str(), offload ? " offload" : "", diff);
    ok = ok && diff == 0.0;
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

int worker_main(const std::string& what) {
  std::string error;
  const dist::DistEnv env = dist::read_dist_env(&error);
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  torch::set_num_threads(1);  // several ranks share a small machine
  try {
    if (what == "train") return train_worker(env);
    if (what == "resume") return resume_worker(env);
    std::fprintf(stderr, "unknown worker %s\n", what.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", env.rank, e.what());
    return 1;
  }
}

// ---- test side ------------------------------------------------------------------------------

struct Launched {
  int code = -1;
  QString status_reason;
  double seconds = 0;
};

Launched launch_ranks(int n, const QString& what) {
  QTemporaryDir dir;
  dist::LaunchOptions o;
  o.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  o.arguments = {"--zero-worker", what.toStdString()};
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
  if (f.open(QIODevice::ReadOnly))
    l.status_reason = QJsonDocument::fromJson(f.readAll()).object().value("reason").toString();
  return l;
}

// A group that only knows its rank and size: enough to build an optimizer's layout.
class NoCommGroup final : public dist::Group {
 public:
  NoCommGroup(int rank, int size) : Group("world", rank, size) {}

 protected:
  [[noreturn]] static void refuse() { throw std::logic_error("NoCommGroup: no communication in this test"); }
  void do_all_reduce(torch::Tensor&) override { refuse(); }
  torch::Tensor do_all_to_all(const torch::Tensor&) override { refuse(); }
  torch::Tensor do_all_to_all_v(const torch::Tensor&, const std::vector<std::int64_t>&,
                                const std::vector<std::int64_t>&) override {
    refuse();
  }
  torch::Tensor do_all_gather(const torch::Tensor&) override { refuse(); }
  torch::Tensor do_reduce_scatter(const torch::Tensor&) override { refuse(); }
  torch::Tensor do_send_recv(const torch::Tensor&, int, int) override { refuse(); }
  void do_barrier() override { refuse(); }
};

bool contains(const Diagnostics& d, const std::string& what) { return format_all(d).find(what) != std::string::npos; }

}  // namespace

class TstZero : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void initTestCase() { torch::set_num_threads(1); }

  // Rank r's masters are slice r of every bucket of the parameters laid end to end in
  // reverse order: together the ranks hold every element once, padding zero.
  void layoutCoversEveryElementOnce() {
    model::CausalLM lm = tiny_model();
    std::vector<torch::Tensor> flat;
    const auto params = trainable(lm);
    for (auto it = params.rbegin(); it != params.rend(); ++it) flat.push_back(it->param.detach().reshape({-1}));
    const torch::Tensor all = torch::cat(flat);
    for (const int n : {2, 3, 4}) {
      std::vector<torch::Tensor> masters;
      torch::Tensor layout;
      for (int r = 0; r < n; ++r) {
        NoCommGroup g(r, n);
        train::ZeroAdamW z(trainable(lm), train::AdamWOptions{}, g, 2, r % 2 == 1, kSmallBucket);
        masters.push_back(z.state().front().second);
        layout = z.layout();
        QCOMPARE(z.shard_elements(), masters.front().numel());
        if (z.offload()) {  // 12 bytes per shard element + step + two fp32 staging buffers of the largest slice
          std::int64_t largest = 0;
          for (std::int64_t b = 0; b < layout[5].item<std::int64_t>(); ++b)
            largest = std::max(largest, layout[8 + b].item<std::int64_t>() / n);
          QCOMPARE(z.host_state_bytes(), 12 * z.shard_elements() + 4 + 2 * ((4 * largest + 7) / 8 * 8));
          QCOMPARE(z.state_bytes(), 4 * z.shard_elements());
        } else {
          QCOMPARE(z.host_state_bytes(), std::int64_t{0});
        }
      }
      const auto buckets = layout[5].item<std::int64_t>();
      QCOMPARE(buckets, (all.numel() + kSmallBucket - 1) / kSmallBucket);
      std::vector<torch::Tensor> rebuilt;
      std::int64_t at = 0, left = all.numel();
      for (std::int64_t b = 0; b < buckets; ++b) {
        const std::int64_t padded = layout[8 + b].item<std::int64_t>(), slice = padded / n;
        QCOMPARE(padded % n, std::int64_t{0});
        std::vector<torch::Tensor> parts;
        for (int r = 0; r < n; ++r) parts.push_back(masters[static_cast<std::size_t>(r)].narrow(0, at, slice));
        const torch::Tensor bucket = torch::cat(parts);
        const std::int64_t elements = std::min(kSmallBucket, left);
        QVERIFY(bucket.narrow(0, elements, padded - elements).eq(0).all().item<bool>());
        rebuilt.push_back(bucket.narrow(0, 0, elements));
        at += slice;
        left -= elements;
      }
      QVERIFY(torch::cat(rebuilt).equal(all));
    }
  }

  void loadStateRefusals() {
    model::CausalLM lm = tiny_model();
    NoCommGroup r0of2(0, 2), r1of2(1, 2), r0of4(0, 4);
    train::ZeroAdamW two(trainable(lm), train::AdamWOptions{}, r0of2, 2, false);
    const train::NamedTensors saved = two.state();

    // Another world size.
    {
      train::ZeroAdamW four(trainable(lm), train::AdamWOptions{}, r0of4, 2, false);
      const Diagnostics d = four.load_state(saved, "ckpt/optimizer.rank0.safetensors");
      qInfo("%s", format_all(d).c_str());
      QVERIFY(has_errors(d));
      QCOMPARE(d.front().key, std::string("zero.layout"));
      QVERIFY(contains(d, "ckpt/optimizer.rank0.safetensors: error: zero.layout: "));
      QVERIFY(contains(d, "sharded over 2 processes, this run has 4"));
    }
    // Another rank's file.
    {
      train::ZeroAdamW other(trainable(lm), train::AdamWOptions{}, r1of2, 2, false);
      const Diagnostics d = other.load_state(saved, "f");
      QVERIFY(contains(d, "is rank 0's state, expected rank 1's"));
    }
    // Another bucket size, another parameter set, no layout, a tensor of the wrong size.
    {
      train::ZeroAdamW small(trainable(lm), train::AdamWOptions{}, r0of2, 2, false, kSmallBucket);
      QVERIFY(contains(small.load_state(saved, "f"), "buckets of 67108864 elements"));
      auto fewer = trainable(lm);
      fewer.pop_back();
      train::ZeroAdamW partial(fewer, train::AdamWOptions{}, r0of2, 2, false);
      QVERIFY(contains(partial.load_state(saved, "f"), "other trainable parameters"));
      train::NamedTensors no_layout(saved.begin(), saved.end() - 1);
      QVERIFY(contains(two.load_state(no_layout, "f"), "zero.layout: missing"));
      train::NamedTensors cut = saved;
      cut[1].second = cut[1].second.narrow(0, 0, 5);
      const Diagnostics d = two.load_state(cut, "f");
      QVERIFY(contains(d, "zero.exp_avg.rank0: has 5 elements"));
    }
    // The stage does not change the layout: a ZeRO-1 state loads into ZeRO-2 (and offload).
    {
      train::ZeroAdamW one(trainable(lm), train::AdamWOptions{}, r0of2, 1, true);
      const Diagnostics d = one.load_state(saved, "f");
      QVERIFY2(d.empty(), format_all(d).c_str());
      // Offload: masters, moments and step on the host with one staging buffer (one bucket:
      // the whole shard, fp32); the fp32 gradient accumulator on the device.
      QCOMPARE(one.bucket_count(), std::size_t{1});
      QCOMPARE(one.host_state_bytes(), 3 * 4 * one.shard_elements() + 4 + (4 * one.shard_elements() + 7) / 8 * 8);
      QCOMPARE(one.state_bytes(), 4 * one.shard_elements());
      QCOMPARE(two.host_state_bytes(), std::int64_t{0});
      QCOMPARE(two.state_bytes(), 4 * 4 * two.shard_elements() + 4);
    }
  }

  void badInput() {
    model::CausalLM lm = tiny_model();
    NoCommGroup g(0, 2);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, train::ZeroAdamW(trainable(lm), {}, g, 3, false));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, train::ZeroAdamW(trainable(lm), {}, g, 0, false));
    auto mixed = trainable(lm);
    mixed.push_back({"elsewhere", torch::zeros({4}, torch::TensorOptions().device(torch::kMeta)), true});
    try {
      train::ZeroAdamW z(mixed, {}, g, 2, false);
      QFAIL("parameters on two devices were accepted");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(std::string(e.what()).find("elsewhere") != std::string::npos, e.what());
    }
  }

  void training_data() {
    QTest::addColumn<int>("ranks");
    QTest::newRow("1 rank (ZeRO-Offload on one process)") << 1;
    QTest::newRow("2 ranks") << 2;
    QTest::newRow("4 ranks") << 4;
  }
  void training() {
    QFETCH(int, ranks);
    const Launched l = launch_ranks(ranks, "train");
    qInfo("%d ranks: %.1f s", ranks, l.seconds);
    QVERIFY2(l.code == 0, qPrintable(l.status_reason));
  }

  void resumeFromState() {
    const Launched l = launch_ranks(2, "resume");
    qInfo("2 ranks: %.1f s", l.seconds);
    QVERIFY2(l.code == 0, qPrintable(l.status_reason));
  }
};

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--zero-worker") return worker_main(argv[2]);
  TstZero t;
  return QTest::qExec(&t, argc, argv);
}
#include "tst_zero.moc"
