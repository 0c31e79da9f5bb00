// Parallel runs of the real binary on the CPU (docs/parallel.md): `odyssey-train run` with
// several processes launches real ranks that talk through the store transport. The oracle is
// the single-process run of the same preset on the same global batch:
//   - Ulysses 2, ring 2, Ulysses 2 x ring 2, Ulysses 4 with KV heads replicated (the model
//     has 2), data parallel 2, and dp 2 x Ulysses 2: every step's loss and gradient norm,
//     the eval loss and the final adapter equal the single process's within 1e-5;
//   - a tiny Qwen3-MoE (the quickstart's tokenizer, random weights, the load-balancing loss on)
//     with LoRA on attention and on the experts, its experts split over 2 ranks (Ulysses 2) and
//     over 4 (Ulysses 2 x ring 2), and over 2 within Ulysses 4: the same, and the saved adapter
//     is whole (docs/moe.md);
//   - a rank killed with SIGKILL stops every rank within 10 s, status.json names the rank;
//   - SIGTERM to the launcher stops all ranks after a checkpoint, exit 0;
//   - a port in use and heads no split can serve are clear errors with nothing left running;
//   - two "machines": two network namespaces joined by a veth pair, one launcher in each
//     (nnodes 2), the store transport across the link: the run equals the single process, and
//     cutting the link or killing one side ends both sides with a clear status (needs root
//     and `ip`; skipped otherwise);
//   - a local process that connects to the run's rendezvous store while it trains (reads the
//     number of keys, gets, sets 1-byte and right-sized garbage under the store transport's
//     old key names and guessed names, deletes them) changes nothing: the run completes with
//     the single process's losses (issue 21, item 1), and the run's secret is in no file of the
//     run directory nor on a rank's command line; a multi-node launch without
//     ODYSSEY_STORE_SECRET is a usage error; under torchrun the ranks say the store is
//     unauthenticated unless the secret is exported.
// LibTorch before Qt: Qt's keyword macros (slots, signals) clash with its headers.
#include "model/decoder.h"
#include "model/safetensors.h"
#include "model/weights.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <QtTest>

#include <QDir>
#include <QDirIterator>
#include <QFileInfo>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <memory>
#include <thread>
#include <vector>

namespace {

QString src(const char* rel) { return QStringLiteral(ODYSSEY_SOURCE_DIR) + "/" + rel; }

struct Run {
  int code = -1;
  QString out, err;
  double seconds = 0;
};

Run odyssey_train(const QStringList& args, int timeout_ms = 600000) {
  QProcess p;
  p.setProgram(QStringLiteral(ODYSSEY_TRAIN_BIN));
  p.setArguments(args);
  QElapsedTimer t;
  t.start();
  p.start();
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    qFatal("odyssey-train did not finish in time");
  }
  Run r;
  r.seconds = static_cast<double>(t.elapsed()) / 1000.0;
  r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

QString only_run(const QString& output) {
  const QStringList runs = QDir(output).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
  if (runs.size() != 1) return {};
  return output + "/" + runs.front();
}

QList<QJsonObject> events(const QString& dir, const QString& type) {
  QFile f(dir + "/events.jsonl");
  QList<QJsonObject> out;
  if (!f.open(QIODevice::ReadOnly)) return out;
  for (const QByteArray& line : f.readAll().split('\n')) {
    if (line.trimmed().isEmpty()) continue;
    const QJsonObject o = QJsonDocument::fromJson(line).object();
    if (o.value("type").toString() == type) out << o;
  }
  return out;
}

QJsonObject status(const QString& dir) {
  QFile f(dir + "/status.json");
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QJsonDocument::fromJson(f.readAll()).object();
}

// LoRA on every projection, no dropout (each rank would draw its own mask), packed rows of
// several samples whose lengths need padding under every split, accumulation 2.
QString preset(const QTemporaryDir& tmp, const QString& name, const QString& extra) {
  const QString p = tmp.filePath(name + ".yaml");
  QFile f(p);
  if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write %s", qPrintable(p));
  const QString text = "model: " + src("resources/quickstart/model") +
                       "\n"
                       "template: chatml\n"
                       "system: \"You answer with the result only.\"\n"
                       "dataset: [" +
                       src("resources/quickstart/data/train.jsonl") +
                       "#200]\n"
                       "val_dataset: [" +
                       src("resources/quickstart/data/val.jsonl") +
                       "#8]\n"
                       "max_length: 128\n"
                       "packing: true\n"
                       "tuner_type: lora\nlora_rank: 4\nlora_alpha: 8\nlora_dropout: 0.0\n"
                       "target_modules: [all-linear]\n"
                       // Adam's update m/(sqrt(v)+eps) turns a gradient element at rounding-noise level
                       // into a full step of either sign; with eps 1 the update is linear in the
                       // gradient, so the final adapter compares every gradient of every step.
                       "learning_rate: 0.05\nadam_epsilon: 1.0\n"
                       "warmup_steps: 1\n"
                       "max_steps: 3\n"
                       "gradient_accumulation_steps: 2\n"
                       "activation_checkpointing: every:2\n"
                       "device: cpu\n"
                       "torch_dtype: float32\n"
                       "logging_steps: 1\n"
                       "eval_steps: 3\n"
                       "save_steps: 100\n"
                       "output_dir: " +
                       tmp.filePath("out-" + name) + "\n";
  // `extra` overrides keys of the base (a key twice is a YAML error).
  QStringList lines = text.split('\n');
  for (const QString& e : extra.split('\n', Qt::SkipEmptyParts)) {
    const QString key = e.section(':', 0, 0) + ":";
    lines.removeIf([&](const QString& l) { return l.startsWith(key); });
    lines << e;
  }
  f.write(lines.join('\n').toUtf8() + "\n");
  return p;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(1e-12, std::abs(b)); }

struct Outcome {
  QString dir;
  QList<double> loss, grad_norm;
  double eval_loss = 0;
  double seconds = 0;
};

// Every step's loss and gradient norm, and the last eval loss, of a finished run.
Outcome outcome_of(const QString& dir) {
  Outcome o;
  o.dir = dir;
  for (const auto& e : events(dir, "step")) {
    o.loss << e.value("loss").toDouble();
    o.grad_norm << e.value("grad_norm").toDouble();
  }
  const auto ev = events(dir, "eval");
  if (!ev.isEmpty()) o.eval_loss = ev.back().value("loss").toDouble();
  return o;
}

Outcome train(const QTemporaryDir& tmp, const QString& name, const QString& extra) {
  const Run r = odyssey_train({"run", preset(tmp, name, extra), "--name", name});
  if (r.code != 0)
    qFatal("%s failed (%d):\n%s\n%s", qPrintable(name), r.code, qPrintable(r.out.right(3000)),
           qPrintable(r.err.right(3000)));
  Outcome o = outcome_of(only_run(tmp.filePath("out-" + name)));
  o.seconds = r.seconds;
  return o;
}

// The run directory under `output` once it holds at least `steps` step events, else "".
QString run_with_steps(const QString& output, qsizetype steps) {
  const QString dir = only_run(output);
  return !dir.isEmpty() && events(dir, "step").size() >= steps ? dir : QString();
}

// Largest over the adapters' tensors of max |a - b| / max |b| (per tensor: lora_B starts at
// zero and stays small, so it is not measured against lora_A's scale).
double adapter_difference(const QString& a_dir, const QString& b_dir) {
  const auto a =
      odyssey::SafetensorsFile::open((a_dir + "/checkpoints/checkpoint-3/adapter_model.safetensors").toStdString());
  const auto b =
      odyssey::SafetensorsFile::open((b_dir + "/checkpoints/checkpoint-3/adapter_model.safetensors").toStdString());
  if (!a.ok() || !b.ok()) qFatal("adapter missing in %s or %s", qPrintable(a_dir), qPrintable(b_dir));
  if (a.value->names() != b.value->names()) qFatal("the adapters hold different tensors");
  double worst = 0;
  for (const auto& n : a.value->names()) {
    const auto ta = a.value->load(n, torch::kFloat32, torch::kCPU);
    const auto tb = b.value->load(n, torch::kFloat32, torch::kCPU);
    if (!ta.ok() || !tb.ok()) qFatal("cannot load %s", n.c_str());
    const double scale = tb.value.abs().max().item<double>();
    if (scale == 0) qFatal("%s did not train", n.c_str());
    worst = std::max(worst, (ta.value - tb.value).abs().max().item<double>() / scale);
  }
  return worst;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  QDir tasks(QString("/proc/%1/task").arg(pid));
  for (const QString& t : tasks.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    QFile f(tasks.filePath(t + "/children"));
    if (!f.open(QIODevice::ReadOnly)) continue;
    for (const QByteArray& c : f.readAll().split(' '))
      if (!c.trimmed().isEmpty()) out.push_back(static_cast<pid_t>(c.trimmed().toLong()));
  }
  return out;
}

bool alive(pid_t pid) {
  QFile f(QString("/proc/%1/stat").arg(pid));
  if (!f.open(QIODevice::ReadOnly)) return false;
  const QByteArray s = f.readAll();
  const qsizetype close = s.lastIndexOf(')');
  return close > 0 && s.size() > close + 2 && s[close + 2] != 'Z';
}

// What a store attacker did and saw (storeAttackChangesNothing).
struct Attack {
  int rounds = 0;
  std::int64_t most_keys = 0;
  int gets = 0, read = 0, sets = 0, deletes = 0;
  std::string stopped_by;  // the store error that ended the attack (the run ended), if any
};

// A process without the run's secret, talking to its store at 127.0.0.1:port until `done`:
// the store transport's key names before issue 21 were <group prefix><seq>:<src>><dst>,
// so it reads, overwrites (1 byte; 121344 bytes, the size of a real message the issue saw)
// and deletes those, and a few guessed names.
void attack_store(int port, const std::atomic<bool>& done, Attack& a) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(5);
  c10::intrusive_ptr<c10d::TCPStore> s;
  try {
    s = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  } catch (const std::exception& e) {
    a.stopped_by = std::string("connect: ") + e.what();
    return;
  }
  const std::vector<std::string> prefixes = {"odyssey/world/", "odyssey/ulysses/dp0/ring0/", "odyssey/dp/sp0/",
                                             "odyssey/ring/dp0/u0/"};
  const std::vector<std::uint8_t> one{0x7f}, sized(121344, 0x41);
  std::vector<std::string> names = {"odyssey/run_dir", "odyssey/run_nonce", "run_dir", "secret", "0:0>1", "0:1>0"};
  for (const auto& p : prefixes)
    for (int seq = 0; seq < 24; ++seq)
      for (const char* pair : {":0>1", ":1>0"}) names.push_back(p + std::to_string(seq) + pair);
  try {
    while (!done.load()) {
      ++a.rounds;
      a.most_keys = std::max(a.most_keys, s->getNumKeys());
      for (std::size_t i = 0; i < names.size() && !done.load(); ++i) {
        ++a.gets;
        if (s->check({names[i]})) {
          (void)s->get(names[i]);
          ++a.read;
        }
        s->set(names[i], i % 2 ? sized : one);
        ++a.sets;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (a.rounds % 4 == 0)
        for (const auto& n : names) a.deletes += s->deleteKey(n) ? 1 : 0;
    }
  } catch (const std::exception& e) {
    a.stopped_by = e.what();
    a.stopped_by = a.stopped_by.substr(0, a.stopped_by.find('\n'));
  }
}

// A multi-node job's store secret, as a job script would export it on every node.
const QString kJobSecret = QStringLiteral("4f6479737365792d746573742d6a6f622d7365637265742d30303030303030");

QByteArray bytes(const QString& file) {
  QFile f(file);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// A loopback port nothing listens on (bound, read and closed).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) qFatal("bind");
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

// `n` ranks (2 unless said) started by hand with torchrun's environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, ...), each running `odyssey-train run <args>`; waits for all of
// them. Rank 0 hosts the store, as without torchrun's agent; with `agent_store` this process
// hosts it, as torchrun's agent does, so that no rank's exit takes it from the others.
struct HandRanks {
  std::vector<Run> r;
};
HandRanks hand_launch(const QStringList& args, int n = 2, bool agent_store = false, int timeout_ms = 300000) {
  int port = free_port();
  c10::intrusive_ptr<c10d::TCPStore> agent;
  if (agent_store) {
    c10d::TCPStoreOptions o;
    o.port = 0;
    o.isServer = true;
    o.waitWorkers = false;
    agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
    port = agent->getPort();
  }
  std::vector<std::unique_ptr<QProcess>> p;
  for (int rank = 0; rank < n; ++rank) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char* k : {"ODYSSEY_LAUNCHER_PID", "ODYSSEY_RUN_DIR", "TORCHELASTIC_USE_AGENT_STORE"}) env.remove(k);
    if (agent_store) {
      env.insert("TORCHELASTIC_USE_AGENT_STORE", "True");
      env.insert("ODYSSEY_STORE_SECRET", kJobSecret);
    }
    env.insert("RANK", QString::number(rank));
    env.insert("LOCAL_RANK", QString::number(rank));
    env.insert("WORLD_SIZE", QString::number(n));
    env.insert("LOCAL_WORLD_SIZE", QString::number(n));
    env.insert("GROUP_RANK", "0");
    env.insert("MASTER_ADDR", "127.0.0.1");
    env.insert("MASTER_PORT", QString::number(port));
    env.insert("ODYSSEY_COMM_TIMEOUT_S", "30");
    p.push_back(std::make_unique<QProcess>());
    p.back()->setProcessEnvironment(env);
    p.back()->start(QStringLiteral(ODYSSEY_TRAIN_BIN), args);
  }
  HandRanks h;
  h.r.resize(static_cast<std::size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    QProcess& q = *p[static_cast<std::size_t>(rank)];
    if (!q.waitForFinished(timeout_ms)) {
      for (auto& k : p) k->kill();
      qFatal("a hand-started rank did not finish in time");
    }
    Run& r = h.r[static_cast<std::size_t>(rank)];
    r.code = q.exitStatus() == QProcess::NormalExit ? q.exitCode() : -2;
    r.out = QString::fromUtf8(q.readAllStandardOutput());
    r.err = QString::fromUtf8(q.readAllStandardError());
  }
  return h;
}

ino_t inode(const QString& path) {
  struct stat st {};
  return ::stat(path.toLocal8Bit().constData(), &st) == 0 ? st.st_ino : 0;
}

// Two network namespaces joined by a veth pair: node 0 at 10.77.N.1, node 1 at 10.77.N.2.
struct TwoHosts {
  QString a, b, va, vb, addr0;
  bool ok = false;
  QString why;

  static bool ip(const QStringList& args, QString* err = nullptr) {
    QProcess p;
    p.start("ip", args);
    if (!p.waitForFinished(10000) || p.exitCode() != 0) {
      if (err) *err = "ip " + args.join(' ') + ": " + QString::fromUtf8(p.readAllStandardError()).trimmed();
      return false;
    }
    return true;
  }
  void up() {
    const QString n = QString::number(::getpid() % 250);
    const QString tag = QString::number(::getpid());
    a = "ody-a" + tag;
    b = "ody-b" + tag;
    va = "oa" + tag;
    vb = "ob" + tag;
    addr0 = "10.77." + n + ".1";
    if (::geteuid() != 0) {
      why = "needs root for network namespaces";
      return;
    }
    ok = ip({"netns", "add", a}, &why) && ip({"netns", "add", b}, &why) &&
         ip({"link", "add", va, "type", "veth", "peer", "name", vb}, &why) &&
         ip({"link", "set", va, "netns", a}, &why) && ip({"link", "set", vb, "netns", b}, &why) &&
         ip({"-n", a, "addr", "add", addr0 + "/24", "dev", va}, &why) &&
         ip({"-n", b, "addr", "add", "10.77." + n + ".2/24", "dev", vb}, &why) &&
         ip({"-n", a, "link", "set", va, "up"}, &why) && ip({"-n", b, "link", "set", vb, "up"}, &why) &&
         ip({"-n", a, "link", "set", "lo", "up"}, &why) && ip({"-n", b, "link", "set", "lo", "up"}, &why);
  }
  void down() {
    ip({"netns", "del", a});
    ip({"netns", "del", b});
  }
  // One node's launcher, inside its namespace.
  void start(QProcess& p, const QString& ns, int node, const QString& preset, const QString& output, int port) const {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("ODYSSEY_COMM_TIMEOUT_S", "10");
    env.insert("ODYSSEY_STORE_SECRET", kJobSecret);  // the job's, the same on both nodes
    p.setProcessEnvironment(env);
    p.start("ip", {"netns", "exec", ns, QStringLiteral(ODYSSEY_TRAIN_BIN), "run", preset, "--node-rank",
                   QString::number(node), "--master-addr", addr0, "--master-port", QString::number(port), "--set",
                   "output_dir=" + output});
  }
};

}  // namespace

class TstParallelRun : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  Outcome single_, single_b2_;
  TwoHosts hosts_;

  // Both nodes of a two-namespace run of `preset`; returns node 0's run directory.
  struct Pair {
    QProcess n0, n1;
    QString out0, out1;
  };
  void start_pair(Pair& p, const QString& preset, const QString& name, int port) {
    p.out0 = tmp_.filePath("out-" + name + "-node0");
    p.out1 = tmp_.filePath("out-" + name + "-node1");
    hosts_.start(p.n0, hosts_.a, 0, preset, p.out0, port);
    hosts_.start(p.n1, hosts_.b, 1, preset, p.out1, port);
    QVERIFY(p.n0.waitForStarted() && p.n1.waitForStarted());
  }

  void compare(const QString& what, const Outcome& got, const Outcome& want) {
    QCOMPARE(got.loss.size(), want.loss.size());
    double worst_loss = 0, worst_norm = 0;
    for (qsizetype i = 0; i < want.loss.size(); ++i) {
      worst_loss = std::max(worst_loss, rel(got.loss[i], want.loss[i]));
      worst_norm = std::max(worst_norm, rel(got.grad_norm[i], want.grad_norm[i]));
    }
    const double eval = rel(got.eval_loss, want.eval_loss);
    const double adapter = adapter_difference(got.dir, want.dir);
    qInfo(
        "%s: %lld steps, worst rel. error: loss %.2e, grad norm %.2e, eval loss %.2e, final adapter tensors %.2e (%.1f "
        "s)",
        qPrintable(what), static_cast<long long>(want.loss.size()), worst_loss, worst_norm, eval, adapter, got.seconds);
    QVERIFY2(worst_loss < 1e-5, qPrintable(what + ": loss"));
    QVERIFY2(worst_norm < 1e-5, qPrintable(what + ": grad norm"));
    QVERIFY2(eval < 1e-5, qPrintable(what + ": eval loss"));
    QVERIFY2(adapter < 1e-5, qPrintable(what + ": adapter"));
  }

  // A tiny Qwen3-MoE (the quickstart's tokenizer, random weights, the load-balancing loss on
  // in its config.json), written once.
  QString tiny_moe() {
    const QString dir = tmp_.filePath("tiny-moe");
    if (QFileInfo::exists(dir + "/model.safetensors")) return dir;
    if (!QDir().mkpath(dir)) qFatal("cannot make %s", qPrintable(dir));
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      if (!QFile::copy(src("resources/quickstart/model/") + f, dir + "/" + f)) qFatal("cannot copy %s", f);
    const std::string config =
        R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
            "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "vocab_size": 1024, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
            "initializer_range": 0.05, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "norm_topk_prob": true, "output_router_logits": true, "router_aux_loss_coef": 0.1,
            "bos_token_id": 1021, "eos_token_id": 1023, "tie_word_embeddings": false, "dtype": "float32"})";
    {
      QFile f(dir + "/config.json");
      if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write config.json");
      f.write(QByteArray::fromStdString(config));
    }
    auto cfg = odyssey::parse_decoder_config(config, (dir + "/config.json").toStdString());
    if (!cfg.ok()) qFatal("%s", odyssey::format_all(cfg.diagnostics).c_str());
    torch::manual_seed(3);
    odyssey::model::CausalLM lm(cfg.value, odyssey::model::DecoderOptions{});
    lm->initialize_random();
    const auto saved = odyssey::model::save_weights(lm, dir.toStdString(), 5'000'000'000, /*copy_config=*/false);
    if (!saved.ok()) qFatal("%s", odyssey::format_all(saved.diagnostics).c_str());
    return dir;
  }

 private Q_SLOTS:
  void cleanupTestCase() {
    if (hosts_.ok) hosts_.down();
  }

  void initTestCase() {
    QVERIFY(tmp_.isValid());
    hosts_.up();
    single_ = train(tmp_, "single", "per_device_train_batch_size: 2\n");
    single_b2_ = train(tmp_, "single-b4", "per_device_train_batch_size: 4\n");
    QCOMPARE(static_cast<int>(single_.loss.size()), 3);
    qInfo("single process: losses %.6f %.6f %.6f (%.1f s)", single_.loss[0], single_.loss[1], single_.loss[2],
          single_.seconds);
  }

  void ulysses2() {
    const Outcome o =
        train(tmp_, "u2", "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\n");
    QCOMPARE(events(o.dir, "run_start").front().value("mesh").toObject().value("ulysses").toInt(), 2);
    compare("Ulysses 2", o, single_);
    // Communication is reported per step and collective kind.
    const QJsonArray coll = events(o.dir, "step").back().value("collectives").toArray();
    bool a2a = false;
    for (const auto& c : coll)
      a2a = a2a || (c.toObject().value("op").toString() == "all_to_all" && c.toObject().value("bytes").toDouble() > 0);
    QVERIFY2(a2a, "no all_to_all in the step's collectives");
  }

  // Checkpoint segments under sequence parallelism: every layer checkpointed, one stored input
  // per two layers (the quickstart's 4 layers: two segments), so backward runs layers 0 and 2
  // forward again, their collectives (all-to-all, the ring's exchanges) included, on every rank
  // in the same order. Same training as one process.
  void checkpointSegments_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("layout");
    QTest::newRow("Ulysses 2") << "u2-seg"
                               << "nproc_per_node: 2\nsequence_parallel_size: 2\n";
    QTest::newRow("Ulysses 2 x ring 2") << "u2r2-seg"
                                        << "nproc_per_node: 4\nsequence_parallel_size: 4\n";
  }
  void checkpointSegments() {
    QFETCH(QString, name);
    QFETCH(QString, layout);
    const Outcome o = train(tmp_, name,
                            "per_device_train_batch_size: 2\n" + layout +
                                "activation_checkpointing: all\nkeep_attention: none\nlayers_per_checkpoint: 2\n");
    QFile log(o.dir + "/logs/rank-0.log");
    QVERIFY(log.open(QIODevice::ReadOnly));
    QVERIFY2(log.readAll().contains("up to 2 consecutive checkpointed layers share one stored input"),
             "the run did not say that its layers share stored inputs");
    compare(QString(QTest::currentDataTag()) + ", checkpoint segments", o, single_);
  }

  // Every checkpointed layer (every:2) keeps its attention output: the layers' recomputation
  // takes this rank's kept output and log-sum-exp (Ulysses: its heads of the gathered row; ring,
  // the CPU's reference ring over zigzag packed samples: its queries' merged output) instead of
  // running attention, and its backward starts from them. Same training as one process
  // recomputing everything.
  void keepsAttention_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("layout");
    QTest::newRow("Ulysses 2") << "u2-kept"
                               << "nproc_per_node: 2\nsequence_parallel_size: 2\n";
    QTest::newRow("ring 2") << "r2-kept"
                            << "nproc_per_node: 2\nsequence_parallel_size: 2\nulysses_size: 1\n";
    QTest::newRow("Ulysses 2 x ring 2") << "u2r2-kept"
                                        << "nproc_per_node: 4\nsequence_parallel_size: 4\n";
  }
  void keepsAttention() {
    QFETCH(QString, name);
    QFETCH(QString, layout);
    const Outcome o = train(tmp_, name, "per_device_train_batch_size: 2\n" + layout + "keep_attention: all\n");
    QFile log(o.dir + "/logs/rank-0.log");
    QVERIFY(log.open(QIODevice::ReadOnly));
    QVERIFY2(log.readAll().contains("; 2 of them keep their attention output"),
             "the run did not say that its checkpointed layers keep their attention output");
    compare(QString(QTest::currentDataTag()) + ", kept attention", o, single_);
    if (name != "r2-kept") return;
    // The ring's recomputations did not run its forward pass: fewer K/V exchanges per step
    // than the same run recomputing attention.
    const Outcome plain =
        train(tmp_, "r2-recompute", "per_device_train_batch_size: 2\n" + layout + "keep_attention: none\n");
    auto exchanges = [](const QString& dir) {
      double calls = 0;
      for (const auto& c : events(dir, "step").back().value("collectives").toArray())
        if (c.toObject().value("op").toString() == "send_recv") calls += c.toObject().value("calls").toDouble();
      return calls;
    };
    qInfo("send/recv calls in the last step: %g kept, %g recomputing", exchanges(o.dir), exchanges(plain.dir));
    QVERIFY(exchanges(o.dir) < exchanges(plain.dir));
  }

  // Issue 21, item 1: any local process could talk to the run's store; a 1-byte value under a
  // transport key made both ranks fail, a right-sized one would have been taken as tensor
  // data. Now every key name is derived from the run's secret and every value carries an
  // HMAC: the attack below touches nothing the ranks read, and the run trains as if alone.
  void storeAttackChangesNothing() {
    QProcess p;
    p.setProgram(QStringLiteral(ODYSSEY_TRAIN_BIN));
    p.setArguments(
        {"run",
         preset(tmp_, "attacked", "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\n"),
         "--name", "attacked"});
    p.start();
    QVERIFY(p.waitForStarted());
    // The launcher prints "launcher: ..., store 127.0.0.1:PORT" once the ranks are started.
    const QRegularExpression store_line("store 127\\.0\\.0\\.1:(\\d+)");
    QByteArray out;
    int port = 0;
    QElapsedTimer w;
    w.start();
    while (port == 0 && w.elapsed() < 120000 && p.state() != QProcess::NotRunning) {
      p.waitForReadyRead(200);
      out += p.readAllStandardOutput();
      const auto m = store_line.match(QString::fromUtf8(out));
      if (m.hasMatch()) port = m.captured(1).toInt();
    }
    QVERIFY2(port > 0, qPrintable("no store port in the launcher's output:\n" + QString::fromUtf8(out.right(2000))));
    std::atomic<bool> done{false};
    Attack a;
    std::thread attacker([&] { attack_store(port, done, a); });
    // The ranks' secret: in their environment (readable by this user only), not on their
    // command line; read here to check below that it is written nowhere.
    QByteArray secret;
    QElapsedTimer since;
    since.start();
    while (secret.isEmpty() && since.elapsed() < 20000) {
      for (pid_t r : children_of(static_cast<pid_t>(p.processId()))) {  // until a rank has exec'd
        QFile env(QString("/proc/%1/environ").arg(r)), cmd(QString("/proc/%1/cmdline").arg(r));
        if (!env.open(QIODevice::ReadOnly) || !cmd.open(QIODevice::ReadOnly)) continue;
        for (const QByteArray& kv : env.readAll().split('\0'))
          if (kv.startsWith("ODYSSEY_STORE_SECRET=")) secret = kv.mid(21);
        if (!secret.isEmpty()) QVERIFY2(!cmd.readAll().contains(secret), "the secret is on a rank's command line");
      }
      if (secret.isEmpty()) QTest::qWait(50);
    }
    QCOMPARE(secret.size(), qsizetype{64});  // 32 bytes from getrandom, in hex
    const bool finished = p.waitForFinished(600000);
    done = true;
    attacker.join();
    out += p.readAllStandardOutput();
    const QString err = QString::fromUtf8(p.readAllStandardError());
    qInfo(
        "store attacker: %d round(s), up to %lld keys seen, %d gets (%d found a value), %d sets, %d deletes; ended by: "
        "%s",
        a.rounds, static_cast<long long>(a.most_keys), a.gets, a.read, a.sets, a.deletes,
        a.stopped_by.empty() ? "the run's end" : a.stopped_by.c_str());
    QVERIFY(finished);
    QVERIFY2(a.sets > 0, "the attacker wrote nothing while the run was going");
    QVERIFY2(p.exitCode() == 0, qPrintable(QString("the attacked run failed (exit %1):\n").arg(p.exitCode()) +
                                           QString::fromUtf8(out.right(2000)) + "\n" + err.right(2000)));
    const QString dir = only_run(tmp_.filePath("out-attacked"));
    compare("Ulysses 2 under a store attack", outcome_of(dir), single_);
    // The secret is nowhere in the run directory (status.json, events, logs, config.yaml) nor
    // in what the launcher printed.
    QVERIFY(!out.contains(secret) && !err.toUtf8().contains(secret));
    QDirIterator files(dir, QDir::Files, QDirIterator::Subdirectories);
    int scanned = 0;
    while (files.hasNext()) {
      QFile f(files.next());
      QVERIFY(f.open(QIODevice::ReadOnly));
      QVERIFY2(!f.readAll().contains(secret), qPrintable("the store secret is in " + f.fileName()));
      ++scanned;
    }
    QVERIFY(scanned >= 4);
  }

  // A job on several nodes: its store listens on the network, so a launch without the job's
  // secret is refused as a usage error, before anything is created.
  void multiNodeNeedsTheJobSecret() {
    QTemporaryDir t;
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("ODYSSEY_STORE_SECRET");
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(ODYSSEY_TRAIN_BIN),
            {"run",
             preset(t, "nosecret",
                    "per_device_train_batch_size: 2\nnnodes: 2\nnproc_per_node: 1\nsequence_parallel_size: 2\n"),
             "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", "29739"});
    QVERIFY(p.waitForFinished(120000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitCode(), 2);
    QVERIFY2(err.contains("ODYSSEY_STORE_SECRET is not set") && err.contains("export ODYSSEY_STORE_SECRET="),
             qPrintable(err));
    QVERIFY(QDir(t.filePath("out-nosecret")).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty());
    env.insert("ODYSSEY_STORE_SECRET", "too-short");
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(ODYSSEY_TRAIN_BIN), p.arguments());
    QVERIFY(p.waitForFinished(120000));
    QCOMPARE(p.exitCode(), 2);
    QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains("at least 32"));
  }

  // Under torchrun's own agent store the ranks get no secret from us: each says its store is
  // unauthenticated; with ODYSSEY_STORE_SECRET exported they authenticate (and say nothing).
  // Both train as one process does.
  void torchrunStoreSecret_data() {
    QTest::addColumn<bool>("with_secret");
    QTest::newRow("no secret") << false;
    QTest::newRow("ODYSSEY_STORE_SECRET exported") << true;
  }
  void torchrunStoreSecret() {
    QFETCH(bool, with_secret);
    const QString torchrun = QFileInfo(QStringLiteral(ODYSSEY_PYTHON)).dir().filePath("torchrun");
    if (!QFileInfo::exists(torchrun)) QSKIP("no torchrun beside ODYSSEY_PYTHON");
    const QString name = with_secret ? "torchrun-secret" : "torchrun-plain";
    const QString p =
        preset(tmp_, name, "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\n");
    QProcess proc;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("ODYSSEY_STORE_SECRET");
    if (with_secret) env.insert("ODYSSEY_STORE_SECRET", kJobSecret);
    proc.setProcessEnvironment(env);
    proc.start(torchrun, {"--no-python", "--nproc-per-node", "2", QStringLiteral(ODYSSEY_TRAIN_BIN), "run", p});
    QVERIFY(proc.waitForFinished(300000));
    const QString all = QString::fromUtf8(proc.readAllStandardOutput() + proc.readAllStandardError());
    QVERIFY2(proc.exitCode() == 0, qPrintable(all.right(3000)));
    const qsizetype said = all.count("is unauthenticated (ODYSSEY_STORE_SECRET is not set");
    QCOMPARE(said, qsizetype{with_secret ? 0 : 2});  // once per rank
    compare("torchrun, " + name, outcome_of(only_run(tmp_.filePath("out-" + name))), single_);
  }

  void ring2() {
    const Outcome o = train(
        tmp_, "r2", "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\nulysses_size: 1\n");
    QCOMPARE(events(o.dir, "run_start").front().value("mesh").toObject().value("ring").toInt(), 2);
    compare("ring 2 (zigzag)", o, single_);
  }

  void hybridUlysses2Ring2() {
    const Outcome o =
        train(tmp_, "u2r2", "per_device_train_batch_size: 2\nnproc_per_node: 4\nsequence_parallel_size: 4\n");
    const QJsonObject mesh = events(o.dir, "run_start").front().value("mesh").toObject();
    QCOMPARE(mesh.value("ulysses").toInt(), 2);  // auto: gcd(2 KV heads, 4)
    QCOMPARE(mesh.value("ring").toInt(), 2);
    compare("Ulysses 2 x ring 2", o, single_);
  }

  void ulysses4ReplicatesKvHeads() {
    const Outcome o = train(
        tmp_, "u4", "per_device_train_batch_size: 2\nnproc_per_node: 4\nsequence_parallel_size: 4\nulysses_size: 4\n");
    QCOMPARE(events(o.dir, "run_start").front().value("mesh").toObject().value("ulysses").toInt(), 4);
    compare("Ulysses 4, 2 KV heads replicated", o, single_);
  }

  void underTorchrun() {
    // The engine unchanged under PyTorch's own launcher (its agent hosts the store).
    const QString torchrun = QFileInfo(QStringLiteral(ODYSSEY_PYTHON)).dir().filePath("torchrun");
    if (!QFileInfo::exists(torchrun)) QSKIP("no torchrun beside ODYSSEY_PYTHON");
    const QString p =
        preset(tmp_, "torchrun", "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\n");
    QProcess proc;
    proc.start(torchrun, {"--no-python", "--nproc-per-node", "2", QStringLiteral(ODYSSEY_TRAIN_BIN), "run", p});
    QVERIFY(proc.waitForFinished(300000));
    QVERIFY2(proc.exitCode() == 0, qPrintable(QString::fromUtf8(proc.readAllStandardError()).right(3000)));
    const Outcome o = outcome_of(only_run(tmp_.filePath("out-torchrun")));
    compare("torchrun --nproc-per-node 2, Ulysses 2", o, single_);
  }

  // Expert parallelism (docs/moe.md): a MoE model whose experts are split over the ranks of
  // the sequence-parallel group trains exactly like one process holding all of them.
  void moeExpertParallel() {
    const QString dir = tiny_moe();
    const QString base = "model: " + dir + "\nper_device_train_batch_size: 2\n";
    const Outcome one = train(tmp_, "moe-single", base);
    const Outcome ep2 =
        train(tmp_, "moe-ep2", base + "nproc_per_node: 2\nsequence_parallel_size: 2\nexpert_parallel_size: 2\n");
    const QJsonObject mesh = events(ep2.dir, "run_start").front().value("mesh").toObject();
    QCOMPARE(mesh.value("world").toInt(), 2);
    QCOMPARE(mesh.value("ep").toInt(), 2);
    compare("MoE, experts over 2 (Ulysses 2)", ep2, one);
    // The load-balancing loss of each step (config.json turns it on) as one process reports it.
    const auto steps_one = events(one.dir, "step"), steps_ep2 = events(ep2.dir, "step");
    QCOMPARE(steps_ep2.size(), steps_one.size());
    for (qsizetype i = 0; i < steps_one.size(); ++i) {
      const double a1 = steps_one[i].value("aux_loss").toDouble(-1), a2 = steps_ep2[i].value("aux_loss").toDouble(-1);
      QVERIFY2(a1 >= 1.0 && std::abs(a2 - a1) <= 1e-5 * a1,
               qPrintable(QString("step %1: aux_loss %2 (one process) vs %3").arg(i + 1).arg(a1).arg(a2)));
    }
    compare("MoE, experts over 4 (Ulysses 2 x ring 2)",
            train(tmp_, "moe-ep4", base + "nproc_per_node: 4\nsequence_parallel_size: 4\nexpert_parallel_size: 4\n"),
            one);
    compare("MoE, experts over 2 within Ulysses 4",
            train(tmp_, "moe-u4ep2",
                  base + "nproc_per_node: 4\nsequence_parallel_size: 4\nulysses_size: 4\nexpert_parallel_size: 2\n"),
            one);
    // The checkpoint's adapter holds every expert: the adapter of 4 experts, as one process saves it.
    const auto a =
        odyssey::SafetensorsFile::open((ep2.dir + "/checkpoints/checkpoint-3/adapter_model.safetensors").toStdString());
    QVERIFY(a.ok());
    bool expert_adapter = false;
    for (const auto& n : a.value->names())
      expert_adapter = expert_adapter || n.find("mlp.experts") != std::string::npos;
    QVERIFY2(expert_adapter, "no expert adapter in the checkpoint");
    // Each rank wrote its optimizer state (its own experts').
    for (const char* f : {"optimizer-rank-00000-of-00002.safetensors", "optimizer-rank-00001-of-00002.safetensors"})
      QVERIFY2(QFileInfo::exists(ep2.dir + "/checkpoints/checkpoint-3/" + f), f);
  }

  // QLoRA on a MoE model (docs/moe.md, "4-bit experts"), as a user runs it: `run` with quant_bits
  // 4 makes the projections and every layer's experts 4-bit and trains the adapters (on attention
  // and the experts: all-linear), and `export --merge` of its checkpoint writes a 16-bit model
  // whose experts are the dequantized stack plus the adapters' update, which loads 16-bit. With
  // expert parallelism (2 ranks) the run is the one process's.
  void moeQlora() {
    const QString dir = tiny_moe();
    const QString name = "moe-qlora";
    const Run r =
        odyssey_train({"run", preset(tmp_, name, "model: " + dir + "\nper_device_train_batch_size: 2\nquant_bits: 4\n"),
                       "--name", name});
    QVERIFY2(r.code == 0, qPrintable(r.err.right(3000)));
    QVERIFY2(r.out.contains("4-bit base: 8 projections and 2 layers' experts in NF4 with double quantization"),
             qPrintable(r.out.left(3000)));
    const Outcome o = outcome_of(only_run(tmp_.filePath("out-" + name)));
    QCOMPARE(o.loss.size(), qsizetype{3});
    for (const double l : o.loss) QVERIFY(std::isfinite(l) && l > 0);
    // The same QLoRA run with the 4-bit experts split over 2 ranks (Ulysses 2): every step as
    // the one process's (each rank's share dequantizes to the whole stack's values).
    compare("MoE QLoRA, 4-bit experts over 2 (Ulysses 2)",
            train(tmp_, "moe-qlora-ep2",
                  "model: " + dir +
                      "\nper_device_train_batch_size: 2\nquant_bits: 4\nnproc_per_node: 2\nsequence_parallel_size: "
                      "2\nexpert_parallel_size: 2\n"),
            o);
    const QString merged = tmp_.filePath("moe-qlora-merged");
    const Run ex = odyssey_train({"export", o.dir + "/checkpoints/checkpoint-3", "--merge", "--output", merged});
    QVERIFY2(ex.code == 0, qPrintable(ex.err + ex.out));
    auto m = odyssey::model::load_causal_lm(merged.toStdString(), odyssey::model::DecoderOptions{});
    QVERIFY2(m.ok(), odyssey::format_all(m.diagnostics).c_str());
    QVERIFY(odyssey::model::quantized_experts(m.value.lm).empty());
    auto b = odyssey::model::load_causal_lm(dir.toStdString(), odyssey::model::DecoderOptions{});
    QVERIFY(b.ok());
    const auto mp = m.value.lm->named_parameters(), bp = b.value.lm->named_parameters();
    const std::string gu = "model.layers.1.mlp.experts.gate_up_proj";
    QVERIFY(mp.contains(gu) && bp.contains(gu));
    // 4-bit rounding (NF4's largest gap is 0.28 of a block's absmax) and the adapters' update.
    const double diff = ((mp[gu] - bp[gu]).abs().max() / bp[gu].abs().max()).item<double>();
    qInfo("merged 4-bit experts against the 16-bit ones: max |diff| / max |w| = %.4f", diff);
    QVERIFY2(diff > 0 && diff < 0.25, qPrintable(QString::number(diff)));
  }

  // The MoE preset keys (docs/moe.md) on one process: router_aux_loss_coef replaces config.json's
  // 0.1 (the first step's loss grows by Δcoef · aux: the same aux for every coefficient, so
  // the two differences are in the coefficients' ratio), and freeze_router leaves the routers
  // of a full fine-tune as they were while the experts train.
  void moeRouterKeys() {
    const QString base =
        "model: " + tiny_moe() + "\nper_device_train_batch_size: 2\nmax_steps: 1\nwarmup_steps: 0\neval_steps: 1\n";
    const Outcome o01 = train(tmp_, "moe-coef-config", base);
    const double l01 = o01.loss.front();
    const double l05 = train(tmp_, "moe-coef-0.5", base + "router_aux_loss_coef: 0.5\n").loss.front();
    const double l10 = train(tmp_, "moe-coef-1", base + "router_aux_loss_coef: 1.0\n").loss.front();
    qInfo("first-step loss with router_aux_loss_coef 0.1 (config.json) / 0.5 / 1.0: %.6f %.6f %.6f", l01, l05, l10);
    QVERIFY(l05 - l01 > 0.1);  // aux >= 1 for top-2 of 4 experts (2 when balanced)
    QVERIFY2(std::abs((l10 - l05) / (l05 - l01) - 0.5 / 0.4) < 1e-4, "the loss is not linear in the coefficient");
    // The step event's aux_loss is that aux, per micro-batch: each of the step's 2 micro-batches
    // (gradient_accumulation_steps 2) adds its own, so the loss moved by Δcoef times twice it.
    const double aux = events(o01.dir, "step").front().value("aux_loss").toDouble(-1);
    qInfo("first-step aux_loss %.6f; (l05 - l01) / 0.4 / 2 = %.6f", aux, (l05 - l01) / 0.4 / 2);
    QVERIFY2(aux >= 1.0 && std::abs((l05 - l01) / 0.4 / 2 - aux) < 1e-4 * aux, "aux_loss is not the loss's aux term");

    const QString full = base +
                         "tuner_type: full\nlora_rank: 8\nlora_alpha: 32\nlora_dropout: 0.05\nlearning_rate: 0.001\n"
                         "adam_epsilon: 1e-8\n";
    const Outcome frozen = train(tmp_, "moe-freeze", full + "freeze_router: true\n");
    const Outcome trained = train(tmp_, "moe-router", full);
    auto tensor = [](const QString& file, const std::string& name) {
      const auto f = odyssey::SafetensorsFile::open(file.toStdString());
      if (!f.ok()) qFatal("cannot open %s", qPrintable(file));
      const auto t = f.value->load(name, torch::kFloat32, torch::kCPU);
      if (!t.ok()) qFatal("%s lacks %s", qPrintable(file), name.c_str());
      return t.value;
    };
    const QString start = tiny_moe() + "/model.safetensors";
    const QString after_frozen = frozen.dir + "/checkpoints/checkpoint-1/model.safetensors";
    const QString after_trained = trained.dir + "/checkpoints/checkpoint-1/model.safetensors";
    for (const char* router : {"model.layers.0.mlp.gate.weight", "model.layers.1.mlp.gate.weight"}) {
      QVERIFY2(tensor(after_frozen, router).equal(tensor(start, router)), router);
      QVERIFY2(!tensor(after_trained, router).equal(tensor(start, router)), router);
    }
    const std::string expert = "model.layers.0.mlp.experts.1.up_proj.weight";
    QVERIFY(!tensor(after_frozen, expert).equal(tensor(start, expert)));
  }

  void dataParallel2() {
    const Outcome o = train(tmp_, "dp2", "per_device_train_batch_size: 2\nnproc_per_node: 2\n");
    compare("data parallel 2 (global batch 4)", o, single_b2_);
  }

  void dp2TimesUlysses2() {
    const Outcome o =
        train(tmp_, "dp2u2", "per_device_train_batch_size: 2\nnproc_per_node: 4\nsequence_parallel_size: 2\n");
    const QJsonObject mesh = events(o.dir, "run_start").front().value("mesh").toObject();
    QCOMPARE(mesh.value("dp").toInt(), 2);
    compare("dp 2 x Ulysses 2 (global batch 4)", o, single_b2_);
  }

  // ZeRO-2 over Ulysses 2 (dp 1: the state is sharded over the sequence-parallel ranks, as
  // DeepSpeed-Ulysses does) equals one process; its checkpoint holds one optimizer file per
  // rank, and a run resumed from it equals the uninterrupted run.
  void zero2OverUlysses2() {
    const QString z =
        "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\nzero_stage: 2\n"
        "save_steps: 2\n";
    const Outcome o = train(tmp_, "z2u2", z);
    const QJsonObject opt = events(o.dir, "run_start").front().value("optimizer").toObject();
    QCOMPARE(opt.value("name").toString(), QStringLiteral("zero2_adamw"));
    QCOMPARE(opt.value("sharded_over").toInt(), 2);
    compare("ZeRO-2 over Ulysses 2", o, single_);
    const QString ck2 = o.dir + "/checkpoints/checkpoint-2";
    for (const char* f : {"optimizer-rank-00000-of-00002.safetensors", "optimizer-rank-00001-of-00002.safetensors"})
      QVERIFY2(QFile::exists(ck2 + "/" + f), f);
    QVERIFY(!QFile::exists(ck2 + "/optimizer.safetensors"));
    const Outcome r = train(tmp_, "z2u2-resumed", z + "resume_from_checkpoint: " + ck2 + "\n");
    QCOMPARE(r.loss.size(), qsizetype{1});
    QCOMPARE(r.loss[0], o.loss[2]);
    const double d = adapter_difference(r.dir, o.dir);
    qInfo("ZeRO-2 resumed from step 2: step 3 loss identical, final adapter max rel diff %.2e", d);
    QCOMPARE(d, 0.0);
    // Another process count cannot read the per-rank state.
    const Run bad = odyssey_train({"run", preset(tmp_, "z2-other",
                                                 "per_device_train_batch_size: 2\nnproc_per_node: 4\n"
                                                 "sequence_parallel_size: 4\nzero_stage: 2\n"
                                                 "resume_from_checkpoint: " +
                                                     ck2 + "\n")});
    QCOMPARE(bad.code, 1);
    QVERIFY2((bad.out + bad.err).contains("optimizer-rank-00000-of-00004"),
             qPrintable(bad.out.right(2000) + bad.err.right(1000)));
    // Every rank finds the mismatch; the launcher reports whichever exits first and kills the
    // rest. Rank 0 writes run_end and status.json (both fsynced) before its last line, so on a
    // loaded disk it is killed before saying anything, and each rank used to name only its own
    // file: the check above then saw rank 1's "optimizer-rank-00001-of-00004". Started by
    // hand around a store this test hosts, no rank is killed and none loses the store: all
    // four must give the same reason, naming every file the run needs and those the
    // checkpoint has.
    const HandRanks h = hand_launch({"run", preset(tmp_, "z2-other-hand",
                                                   "per_device_train_batch_size: 2\nnproc_per_node: 4\n"
                                                   "sequence_parallel_size: 4\nzero_stage: 2\n"
                                                   "resume_from_checkpoint: " +
                                                       ck2 + "\n")},
                                    4, true);
    const QString hand_dir = only_run(tmp_.filePath("out-z2-other-hand"));
    QVERIFY(!hand_dir.isEmpty());
    const QRegularExpression failed_line("(?:^|\\n)failed: ([^\\n]*)");
    QStringList reasons;
    for (int rank = 0; rank < 4; ++rank) {
      QCOMPARE(h.r[static_cast<std::size_t>(rank)].code, 1);
      const QString log = QString::fromUtf8(bytes(hand_dir + QString("/logs/rank-%1.log").arg(rank)));
      const auto m = failed_line.match(log);
      QVERIFY2(m.hasMatch(), qPrintable(QString("rank %1 gave no reason in its log:\n").arg(rank) + log.right(2000)));
      reasons << m.captured(1);
    }
    qInfo("4 ranks resuming a 2-rank ZeRO checkpoint, each says: %s", qPrintable(reasons[0]));
    for (int rank = 1; rank < 4; ++rank) QCOMPARE(reasons[rank], reasons[0]);
    for (const char* f : {"optimizer-rank-00000-of-00004", "optimizer-rank-00003-of-00004",
                          "optimizer-rank-00000-of-00002", "optimizer-rank-00001-of-00002"})
      QVERIFY2(reasons[0].contains(f), f);
  }

  // GaLore over Ulysses 2 (full fine-tuning): the rank-r gradients are all-reduced, refresh
  // steps all-reduce the full gradient first so both ranks take the same SVD; the losses and
  // gradient norms equal one process's. (Three steps, refresh every 2: the losses depend on the
  // first projection only, whose sign does not matter, see docs/optimizers.md.)
  void galoreOverUlysses2() {
    // The base preset's LoRA keys set back to their defaults (a LoRA setting with tuner_type full is an error).
    const QString g =
        "tuner_type: full\nlora_rank: 8\nlora_alpha: 32\nlora_dropout: 0.05\n"
        "use_galore: true\ngalore_rank: 8\ngalore_update_proj_gap: 2\n"
        "per_device_train_batch_size: 2\nadam_epsilon: 1e-8\nlearning_rate: 0.001\n";
    const Outcome one = train(tmp_, "galore1", g);
    const Outcome two = train(tmp_, "galore-u2", g + "nproc_per_node: 2\nsequence_parallel_size: 2\n");
    QCOMPARE(events(two.dir, "run_start").front().value("optimizer").toObject().value("name").toString(),
             QStringLiteral("galore_adamw"));
    QCOMPARE(two.loss.size(), one.loss.size());
    double worst_loss = 0, worst_norm = 0;
    for (qsizetype i = 0; i < one.loss.size(); ++i) {
      worst_loss = std::max(worst_loss, rel(two.loss[i], one.loss[i]));
      worst_norm = std::max(worst_norm, rel(two.grad_norm[i], one.grad_norm[i]));
    }
    qInfo("GaLore over Ulysses 2 vs one process: %lld steps, worst rel. error: loss %.2e, grad norm %.2e",
          static_cast<long long>(one.loss.size()), worst_loss, worst_norm);
    QVERIFY(worst_loss < 1e-5);
    QVERIFY(worst_norm < 1e-5);
  }

  void zeroWithOneProcessIsAnError() {
    const Run r = odyssey_train({"run", preset(tmp_, "z-one", "zero_stage: 2\n")});
    QCOMPARE(r.code, 3);  // an invalid configuration
    QVERIFY2((r.out + r.err).contains("zero_stage"), qPrintable(r.out + r.err));
  }

  void killedRankStopsAll() {
    QTemporaryDir t;
    QProcess p;
    p.setProgram(QStringLiteral(ODYSSEY_TRAIN_BIN));
    p.setArguments(
        {"run",
         preset(t, "kill",
                "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\nmax_steps: 500\n"),
         "--name", "kill"});
    p.start();
    QVERIFY(p.waitForStarted());
    QString dir;
    QTRY_VERIFY_WITH_TIMEOUT(!(dir = run_with_steps(t.filePath("out-kill"), 1)).isEmpty(), 120000);
    const auto ranks = children_of(static_cast<pid_t>(p.processId()));
    QCOMPARE(static_cast<int>(ranks.size()), 2);
    QElapsedTimer timer;
    timer.start();
    ::kill(ranks[1], SIGKILL);
    QVERIFY(p.waitForFinished(30000));
    const double took = static_cast<double>(timer.elapsed()) / 1000.0;
    qInfo("rank killed with SIGKILL: launcher exited %d after %.2f s", p.exitCode(), took);
    QVERIFY2(took < 10.0, "the ranks were not all stopped within 10 s");
    QCOMPARE(p.exitCode(), 1);
    QCOMPARE(status(dir).value("exit_code").toInt(), 128 + SIGKILL);
    for (pid_t r : ranks) QVERIFY2(!alive(r), "a rank outlived the launcher");
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QString("failed"));
    QCOMPARE(st.value("failed_rank").toInt(), 1);
    QVERIFY2(st.value("reason").toString().contains("signal 9"), qPrintable(st.value("reason").toString()));
    QCOMPARE(events(dir, "run_end").size(), 1);
  }

  void sigtermStopsAllAfterCheckpoint() {
    QTemporaryDir t;
    QProcess p;
    p.setProgram(QStringLiteral(ODYSSEY_TRAIN_BIN));
    p.setArguments(
        {"run",
         preset(t, "stop",
                "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\nmax_steps: 500\n"),
         "--name", "stop"});
    p.start();
    QVERIFY(p.waitForStarted());
    QString dir;
    QTRY_VERIFY_WITH_TIMEOUT(!(dir = run_with_steps(t.filePath("out-stop"), 2)).isEmpty(), 120000);
    const auto ranks = children_of(static_cast<pid_t>(p.processId()));
    QElapsedTimer timer;
    timer.start();
    ::kill(static_cast<pid_t>(p.processId()), SIGTERM);
    QVERIFY(p.waitForFinished(60000));
    qInfo("SIGTERM to the launcher: all ranks stopped, exit %d after %.2f s", p.exitCode(),
          static_cast<double>(timer.elapsed()) / 1000.0);
    QCOMPARE(p.exitCode(), 0);
    for (pid_t r : ranks) QVERIFY(!alive(r));
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QString("stopped"));
    const int step = st.value("step").toInt();
    QVERIFY(step >= 2);
    QVERIFY(QFile::exists(dir + QString("/checkpoints/checkpoint-%1/adapter_model.safetensors").arg(step)));
  }

  void twoNodesEqualOneProcess() {
    if (!hosts_.ok) QSKIP(qPrintable("two network namespaces: " + hosts_.why));
    Pair p;
    start_pair(p,
               preset(tmp_, "nodes",
                      "per_device_train_batch_size: 2\nnnodes: 2\nnproc_per_node: 1\nsequence_parallel_size: 2\n"),
               "nodes", 29731);
    QVERIFY(p.n0.waitForFinished(300000) && p.n1.waitForFinished(60000));
    QVERIFY2(p.n0.exitCode() == 0 && p.n1.exitCode() == 0,
             qPrintable(QString::fromUtf8(p.n0.readAllStandardError() + p.n1.readAllStandardError()).right(3000)));
    const Outcome o = outcome_of(only_run(p.out0));
    QCOMPARE(events(o.dir, "run_start").front().value("mesh").toObject().value("nnodes").toInt(), 2);
    QVERIFY(QFile::exists(only_run(p.out1) + "/logs/rank-1.log"));
    compare("2 nodes (network namespaces, veth), Ulysses 2 across the link", o, single_);
  }

  void twoNodesCutLinkStopsBoth() {
    if (!hosts_.ok) QSKIP(qPrintable("two network namespaces: " + hosts_.why));
    Pair p;
    start_pair(p,
               preset(tmp_, "cut",
                      "per_device_train_batch_size: 2\nnnodes: 2\nnproc_per_node: 1\nsequence_parallel_size: "
                      "2\nmax_steps: 5000\n"),
               "cut", 29732);
    QString dir;
    QTRY_VERIFY_WITH_TIMEOUT(!(dir = run_with_steps(p.out0, 1)).isEmpty(), 120000);
    QElapsedTimer t;
    t.start();
    QVERIFY(TwoHosts::ip({"-n", hosts_.b, "link", "set", hosts_.vb, "down"}));
    const bool ended = p.n0.waitForFinished(90000) && p.n1.waitForFinished(30000);
    TwoHosts::ip({"-n", hosts_.b, "link", "set", hosts_.vb, "up"});
    QVERIFY2(ended, "a side kept running after the link was cut");
    qInfo("link cut: node 0 exited %d, node 1 exited %d, both within %.1f s (peer timeout 10 s)", p.n0.exitCode(),
          p.n1.exitCode(), static_cast<double>(t.elapsed()) / 1000.0);
    QCOMPARE(p.n0.exitCode(), 1);
    QCOMPARE(p.n1.exitCode(), 1);
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QString("failed"));
    QVERIFY2(st.value("reason").toString().contains("rank 1"), qPrintable(st.value("reason").toString()));
  }

  void twoNodesKillOneSideStopsBoth() {
    if (!hosts_.ok) QSKIP(qPrintable("two network namespaces: " + hosts_.why));
    Pair p;
    start_pair(p,
               preset(tmp_, "side",
                      "per_device_train_batch_size: 2\nnnodes: 2\nnproc_per_node: 1\nsequence_parallel_size: "
                      "2\nmax_steps: 5000\n"),
               "side", 29733);
    QString dir;
    QTRY_VERIFY_WITH_TIMEOUT(!(dir = run_with_steps(p.out0, 1)).isEmpty(), 120000);
    const auto ranks1 = children_of(static_cast<pid_t>(p.n1.processId()));
    QElapsedTimer t;
    t.start();
    ::kill(static_cast<pid_t>(p.n1.processId()), SIGKILL);  // node 1's launcher; its rank follows it
    QVERIFY2(p.n0.waitForFinished(90000), "node 0 kept running after node 1 was killed");
    qInfo("node 1 killed: node 0 exited %d after %.1f s (peer timeout 10 s)", p.n0.exitCode(),
          static_cast<double>(t.elapsed()) / 1000.0);
    QCOMPARE(p.n0.exitCode(), 1);
    for (pid_t r : ranks1) QTRY_VERIFY_WITH_TIMEOUT(!alive(r), 5000);
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QString("failed"));
    QVERIFY2(st.value("reason").toString().contains("rank 1"), qPrintable(st.value("reason").toString()));
  }

  // Issue 21, finding 2: two ranks started by hand (torchrun's environment) with --run-dir
  // naming a finished run. Before: both trained into it, exit 0, checkpoint-3 deleted and
  // replaced, a second run_start appended. Now: refused before a byte is written, exit 2.
  void finishedRunDirIsRefused() {
    QTemporaryDir t;
    const QString p =
        preset(t, "done", "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\n");
    const Run first = odyssey_train({"run", p, "--name", "done"});
    QVERIFY2(first.code == 0, qPrintable(first.err.right(2000)));
    const QString dir = only_run(t.filePath("out-done"));
    const QString ck = dir + "/checkpoints/checkpoint-3";
    const QByteArray events_before = bytes(dir + "/events.jsonl"), status_before = bytes(dir + "/status.json");
    const QByteArray adapter_before = bytes(ck + "/adapter_model.safetensors");
    const ino_t ck_inode = inode(ck);
    QVERIFY(ck_inode != 0 && !adapter_before.isEmpty());

    const HandRanks h = hand_launch({"run", p, "--run-dir", dir});
    qInfo("--run-dir at a finished run, 2 ranks by hand: exit %d and %d; rank 0 said: %s", h.r[0].code, h.r[1].code,
          qPrintable(h.r[0].err.trimmed().right(600)));
    QCOMPARE(h.r[0].code, 2);
    QCOMPARE(h.r[1].code, 2);
    QVERIFY2(h.r[0].err.contains(dir) && h.r[0].err.contains("ended there (status.json: completed at step 3)"),
             qPrintable(h.r[0].err));
    QVERIFY2(h.r[1].err.contains("rank 0 refused the run directory"), qPrintable(h.r[1].err));
    QCOMPARE(bytes(dir + "/events.jsonl"), events_before);
    QCOMPARE(bytes(dir + "/status.json"), status_before);
    QCOMPARE(inode(ck), ck_inode);
    QCOMPARE(bytes(ck + "/adapter_model.safetensors"), adapter_before);
    QVERIFY(!QFile::exists(dir + "/logs/rank-1.log") || bytes(dir + "/logs/rank-1.log").count('\n') > 0);
  }

  // A second launch into the directory of a run that is still going: refused (exit 2), naming
  // the live owner (the launcher's pid); the running run goes on undisturbed.
  void liveRunDirIsRefused() {
    QTemporaryDir t;
    const QString p = preset(
        t, "live", "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\nmax_steps: 500\n");
    QProcess launcher;
    launcher.start(QStringLiteral(ODYSSEY_TRAIN_BIN), {"run", p, "--name", "live"});
    QVERIFY(launcher.waitForStarted());
    QString dir;
    QTRY_VERIFY_WITH_TIMEOUT(!(dir = run_with_steps(t.filePath("out-live"), 1)).isEmpty(), 120000);
    const HandRanks h = hand_launch({"run", p, "--run-dir", dir, "--set", "max_steps=3"});
    qInfo("--run-dir at a live run: exit %d and %d; rank 0 said: %s", h.r[0].code, h.r[1].code,
          qPrintable(h.r[0].err.trimmed().right(600)));
    QCOMPARE(h.r[0].code, 2);
    QCOMPARE(h.r[1].code, 2);
    const QString owner = "another live process owns it (pid " + QString::number(launcher.processId());
    QVERIFY2(h.r[0].err.contains(dir) && h.r[0].err.contains(owner), qPrintable(h.r[0].err));
    QCOMPARE(launcher.state(), QProcess::Running);
    QCOMPARE(events(dir, "run_start").size(), 1);
    ::kill(static_cast<pid_t>(launcher.processId()), SIGTERM);
    QVERIFY(launcher.waitForFinished(60000));
    QCOMPARE(launcher.exitCode(), 0);
    QCOMPARE(status(dir).value("state").toString(), QString("stopped"));
    QCOMPARE(events(dir, "run_start").size(), 1);
    QCOMPARE(events(dir, "run_end").size(), 1);
  }

  // Issue 21, finding 8: rank 1 fails because rank 0 stalls (SIGSTOP: alive, silent) and its
  // 5 s peer timeout runs out. Its reason is only in logs/rank-1.log; the launcher must copy
  // it into status.json, and take step and elapsed time from events.jsonl. Before:
  // last_error_lines empty or c10d socket warnings, step 0, run_end elapsed ~1e-6 s.
  void failedRankReasonReachesStatus() {
    QTemporaryDir t;
    QProcess launcher;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("ODYSSEY_COMM_TIMEOUT_S", "5");
    launcher.setProcessEnvironment(env);
    launcher.start(
        QStringLiteral(ODYSSEY_TRAIN_BIN),
        {"run",
         preset(t, "stall",
                "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\nmax_steps: 500\n"),
         "--name", "stall"});
    QVERIFY(launcher.waitForStarted());
    QString dir;
    QTRY_VERIFY_WITH_TIMEOUT(!(dir = run_with_steps(t.filePath("out-stall"), 3)).isEmpty(), 180000);
    const auto ranks = children_of(static_cast<pid_t>(launcher.processId()));
    const auto rank0 = static_cast<pid_t>(status(dir).value("pid").toInteger());
    QVERIFY(rank0 > 0 && std::find(ranks.begin(), ranks.end(), rank0) != ranks.end());
    ::kill(rank0, SIGSTOP);
    QVERIFY2(launcher.waitForFinished(90000), "the launcher did not end after rank 1's peer timeout");
    const QString out = QString::fromUtf8(launcher.readAllStandardOutput());
    const QString err = QString::fromUtf8(launcher.readAllStandardError());
    const QJsonObject st = status(dir);
    QStringList lines;
    for (const auto& l : st.value("last_error_lines").toArray()) lines << l.toString();
    const auto steps = events(dir, "step");
    const auto ends = events(dir, "run_end");
    QVERIFY(!steps.isEmpty());
    const QJsonObject last = steps.back();
    qInfo("rank 0 stopped after %lld step events: launcher exit %d; status step %d, failed_rank %d, reason: %s",
          static_cast<long long>(steps.size()), launcher.exitCode(), st.value("step").toInt(),
          st.value("failed_rank").toInt(), qPrintable(st.value("reason").toString()));
    qInfo("last_error_lines:\n  %s", qPrintable(lines.join("\n  ")));
    if (!ends.isEmpty())
      qInfo("run_end: step %d, elapsed_s %.6f (last step event: step %d at elapsed_s %.3f)",
            ends.back().value("step").toInt(), ends.back().value("elapsed_s").toDouble(), last.value("step").toInt(),
            last.value("elapsed_s").toDouble());
    for (pid_t r : ranks) QTRY_VERIFY_WITH_TIMEOUT(!alive(r), 5000);
    QCOMPARE(launcher.exitCode(), 1);
    QCOMPARE(st.value("state").toString(), QString("failed"));
    QCOMPARE(st.value("failed_rank").toInt(), 1);
    const QString why = "rank 1 got nothing from rank 0 within 5 s";
    QVERIFY2(lines.join('\n').contains(why), qPrintable(lines.join('\n')));
    QVERIFY2(st.value("reason").toString().contains(why), qPrintable(st.value("reason").toString()));
    QVERIFY(last.value("step").toInt() >= 3);
    QCOMPARE(st.value("step").toInt(), last.value("step").toInt());
    QCOMPARE(ends.size(), 1);
    QCOMPARE(ends.back().value("step").toInt(), last.value("step").toInt());
    QVERIFY(ends.back().value("elapsed_s").toDouble() >= last.value("elapsed_s").toDouble());
    // The failure is said on stderr, not stdout (docs/cli.md).
    QVERIFY2(err.contains(why), qPrintable(err.right(3000)));
    QVERIFY2(!out.contains("exited abnormally"), qPrintable(out.right(3000)));
  }

  void portInUseIsAnError() {
    // A port another program listens on.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    QVERIFY(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 && ::listen(fd, 1) == 0);
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    QTemporaryDir t;
    const Run r = odyssey_train({"run", preset(t, "port", "per_device_train_batch_size: 2\nnproc_per_node: 2\n"),
                                 "--master-port", QString::number(ntohs(sa.sin_port))});
    ::close(fd);
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("in use"), qPrintable(r.err));
    const QJsonObject st = status(only_run(t.filePath("out-port")));
    QCOMPARE(st.value("state").toString(), QString("failed"));
  }

  void unreachableMasterIsAnError() {
    // A worker (rank 1 of 2, as torchrun or a second node would start it) whose master never
    // answers: a port nothing listens on. It must fail within its communication timeout with
    // the address it tried, not wait for ever.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    QVERIFY(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    const int port = ntohs(sa.sin_port);
    ::close(fd);  // the port is now free and nobody listens on it
    QTemporaryDir t;
    const QString p =
        preset(t, "nomaster", "per_device_train_batch_size: 2\nnproc_per_node: 2\nsequence_parallel_size: 2\n");
    QProcess proc;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("RANK", "1");
    env.insert("LOCAL_RANK", "1");
    env.insert("WORLD_SIZE", "2");
    env.insert("LOCAL_WORLD_SIZE", "2");
    env.insert("MASTER_ADDR", "127.0.0.1");
    env.insert("MASTER_PORT", QString::number(port));
    env.insert("ODYSSEY_COMM_TIMEOUT_S", "3");
    proc.setProcessEnvironment(env);
    QElapsedTimer timer;
    timer.start();
    proc.start(QStringLiteral(ODYSSEY_TRAIN_BIN), {"run", p});
    QVERIFY(proc.waitForFinished(120000));
    const QString err = QString::fromUtf8(proc.readAllStandardError());
    QCOMPARE(proc.exitCode(), 1);
    QVERIFY2(err.contains("could not reach the rendezvous store at 127.0.0.1:" + QString::number(port)),
             qPrintable(err));
    QVERIFY2(timer.elapsed() < 60000, qPrintable(QString("took %1 ms").arg(timer.elapsed())));
    QVERIFY(QDir(t.filePath("out-nomaster"))
                .entryList(QDir::Dirs | QDir::NoDotAndDotDot)
                .isEmpty());  // rank 0 makes the run dir
  }

  void headsNoSplitServesAreRefused() {
    QTemporaryDir t;
    // 4 attention heads cannot be split over 3 Ulysses ranks.
    const Run r = odyssey_train(
        {"run",
         preset(t, "heads", "max_length: 129\nnproc_per_node: 3\nsequence_parallel_size: 3\nulysses_size: 3\n")});
    QCOMPARE(r.code, 3);
    QVERIFY2(r.err.contains("does not divide the model's 4 attention heads") ||
                 r.out.contains("does not divide the model's 4 attention heads"),
             qPrintable(r.err + r.out));
    QVERIFY(QDir(t.filePath("out-heads")).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty());
  }
};

QTEST_GUILESS_MAIN(TstParallelRun)
#include "tst_parallel_run.moc"
