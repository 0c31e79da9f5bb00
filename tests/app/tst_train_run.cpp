// `odyssey-train run` as users run it: a real process training the bundled tiny model on the
// CPU, and what it leaves in the run directory (docs/run-contract.md): the quickstart's
// loss falls; a resumed run equals an uninterrupted one bit for bit; SIGTERM stops after a
// checkpoint with exit 0; a NaN loss and bad data fail with status "failed" and a reason;
// a LoRA checkpoint exports merged. Faults made for real while the process runs: files of the
// run directory replaced (by /dev/full, a directory) or capped by RLIMIT_FSIZE fail the run with
// the reason in whichever output still works; an existing checkpoint is never replaced; resume
// refuses unfinished, forged or altered checkpoints; SIGTERM during tokenization stops at once.
#include <QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QMap>

#include <cmath>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QThread>

#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <utility>

namespace {

struct Run {
  int code = -1;
  QString out, err;
  double seconds = 0;
};

QString src(const char* rel) { return QStringLiteral(ODYSSEY_SOURCE_DIR) + "/" + rel; }

Run odyssey_train(const QStringList& args, int timeout_ms = 240000) {
  QProcess p;
  p.setProgram(QStringLiteral(ODYSSEY_TRAIN_BIN));
  p.setArguments(args);
  p.setWorkingDirectory(QStringLiteral(ODYSSEY_SOURCE_DIR));
  QElapsedTimer t;
  t.start();
  p.start();
  if (!p.waitForFinished(timeout_ms)) qFatal("odyssey-train did not finish in time");
  Run r;
  r.seconds = static_cast<double>(t.elapsed()) / 1000.0;
  r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

// The one run directory under `output`.
QString run_dir(const QString& output) {
  const QStringList runs = QDir(output).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
  if (runs.size() != 1)
    qFatal("expected one run directory in %s, found %lld", qPrintable(output), static_cast<long long>(runs.size()));
  return output + "/" + runs.front();
}

QList<QJsonObject> events(const QString& dir, const QString& type = {}) {
  QFile f(dir + "/events.jsonl");
  if (!f.open(QIODevice::ReadOnly)) qFatal("no events.jsonl in %s", qPrintable(dir));
  QList<QJsonObject> out;
  for (const QByteArray& line : f.readAll().split('\n')) {
    if (line.trimmed().isEmpty()) continue;
    const QJsonObject o = QJsonDocument::fromJson(line).object();
    if (type.isEmpty() || o.value("type").toString() == type) out << o;
  }
  return out;
}

QJsonObject status(const QString& dir) {
  QFile f(dir + "/status.json");
  if (!f.open(QIODevice::ReadOnly)) qFatal("no status.json in %s", qPrintable(dir));
  return QJsonDocument::fromJson(f.readAll()).object();
}

QByteArray bytes(const QString& file) {
  QFile f(file);
  if (!f.open(QIODevice::ReadOnly)) qFatal("cannot read %s", qPrintable(file));
  return f.readAll();
}

// A LoRA preset on the bundled model and data (dropout on, so resume must restore the RNG).
QString lora_preset(const QTemporaryDir& tmp, const QString& extra = {}, bool full = false) {
  const QString p = tmp.filePath("lora.yaml");
  QFile f(p);
  if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write %s", qPrintable(p));
  const QString text =
      "model: " + src("resources/quickstart/model") +
      "\n"
      "template: chatml\n"
      "system: \"You answer with the result only.\"\n"
      "dataset: [" +
      src("resources/quickstart/data/train.jsonl") +
      "#400]\n"
      "split_dataset_ratio: 0.05\n"
      "max_length: 128\n"
      "packing: true\n" +
      QString(full ? "tuner_type: full\n" : "tuner_type: lora\nlora_rank: 4\nlora_alpha: 8\nlora_dropout: 0.1\n") +
      "learning_rate: 0.005\n"
      "warmup_steps: 1\n"
      "max_steps: 6\n"
      "per_device_train_batch_size: 2\n"
      "gradient_accumulation_steps: 2\n"
      "activation_checkpointing: every:2\n"
      "device: cpu\n"
      "torch_dtype: float32\n"
      "logging_steps: 1\n"
      "save_steps: 3\n"
      "save_total_limit: 0\n"
      "output_dir: " +
      tmp.filePath("out") + "\n" + extra;
  f.write(text.toUtf8());
  return p;
}

// The preset at `p` with each {from, to} replaced (lora_preset's own lines, where appending
// would set a key twice).
QString rewrite_preset(const QString& p, std::initializer_list<std::pair<QString, QString>> edits) {
  QFile f(p);
  if (!f.open(QIODevice::ReadOnly)) qFatal("cannot read %s", qPrintable(p));
  QString text = QString::fromUtf8(f.readAll());
  f.close();
  for (const auto& [from, to] : edits) text.replace(from, to);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) qFatal("cannot write %s", qPrintable(p));
  f.write(text.toUtf8());
  return p;
}

// A run of the real binary that a test watches and disturbs while it trains.
struct LiveRun {
  QProcess p;
  QString output;
  QElapsedTimer clock;

  void start(const QStringList& args, const QString& output_dir) {
    output = output_dir;
    p.setProgram(QStringLiteral(ODYSSEY_TRAIN_BIN));
    p.setArguments(args);
    p.setWorkingDirectory(QStringLiteral(ODYSSEY_SOURCE_DIR));
    p.start();
    if (!p.waitForStarted()) qFatal("odyssey-train did not start");
    clock.start();
  }
  // The run directory once it exists ("" after timeout_ms).
  QString dir(int timeout_ms = 60000) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < timeout_ms) {
      const QStringList runs = QDir(output).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
      if (runs.size() == 1) return output + "/" + runs.front();
      QThread::msleep(10);
    }
    return {};
  }
  // Polls events.jsonl until a step event with step >= `step` is there; false after timeout_ms
  // or when the process ended first.
  bool wait_for_step(const QString& dir, int step, int timeout_ms = 120000) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < timeout_ms && p.state() != QProcess::NotRunning) {
      QFile f(dir + "/events.jsonl");
      if (f.open(QIODevice::ReadOnly)) {
        for (const QByteArray& line : f.readAll().split('\n')) {
          const QJsonObject o = QJsonDocument::fromJson(line).object();
          if (o.value("type").toString() == "step" && o.value("step").toInt() >= step) return true;
        }
      }
      QThread::msleep(5);
      p.waitForFinished(0);
    }
    return false;
  }
  // Waits for the exit; kills the process and returns nullopt after timeout_ms.
  std::optional<int> finish(int timeout_ms) {
    if (!p.waitForFinished(timeout_ms)) {
      p.kill();
      p.waitForFinished(5000);
      return std::nullopt;
    }
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
  }
  QString out() { return QString::fromUtf8(p.readAllStandardOutput()); }
  QString err() { return QString::fromUtf8(p.readAllStandardError()); }
};

// Every line of a file that should hold whole JSON lines: false on a half or broken line.
bool whole_json_lines(const QString& file, QString* why) {
  QFile f(file);
  if (!f.open(QIODevice::ReadOnly)) {
    *why = "cannot read " + file;
    return false;
  }
  const QByteArray all = f.readAll();
  if (!all.isEmpty() && !all.endsWith('\n')) {
    *why = file + " ends in half a line: " + QString::fromUtf8(all.right(120));
    return false;
  }
  for (const QByteArray& line : all.split('\n')) {
    if (line.isEmpty()) continue;
    QJsonParseError e;
    QJsonDocument::fromJson(line, &e);
    if (e.error != QJsonParseError::NoError) {
      *why = file + " has a broken line: " + QString::fromUtf8(line.left(120));
      return false;
    }
  }
  return true;
}

void copy_dir(const QString& from, const QString& to) {
  QDir().mkpath(to);
  for (const QString& f : QDir(from).entryList(QDir::Files))
    if (!QFile::copy(from + "/" + f, to + "/" + f)) qFatal("cannot copy %s", qPrintable(from + "/" + f));
}

void write_file(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) qFatal("cannot write %s", qPrintable(path));
  f.write(bytes);
}

}  // namespace

class TstTrainRun : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void quickstartTrains() {
    QTemporaryDir tmp;
    const QString out = tmp.filePath("out");
    const Run r = odyssey_train({"run", "--set", "output_dir=" + out});
    QVERIFY2(r.code == 0, qPrintable(r.err + r.out.right(2000)));
    const QString dir = run_dir(out);
    const auto steps = events(dir, "step");
    QCOMPARE(steps.size(), 100);
    const double first = steps.front().value("loss").toDouble();
    double last10 = 0;
    for (int i = 90; i < 100; ++i) last10 += steps[i].value("loss").toDouble() / 10;
    qInfo(
        "quickstart: 100 steps in %.1f s (process wall time); loss %.4f at step 1, %.4f at step 100, mean of "
        "the last 10 steps %.4f",
        r.seconds, first, steps.back().value("loss").toDouble(), last10);
    QVERIFY(first > 6.5);           // ln(1024) = 6.93: a random model
    QVERIFY(last10 < first - 3.0);  // clearly falling
    const auto evals = events(dir, "eval");
    QCOMPARE(evals.size(), 5);
    QVERIFY(evals.back().value("loss").toDouble() < evals.front().value("loss").toDouble());
    QCOMPARE(events(dir, "run_start").size(), 1);
    const auto ends = events(dir, "run_end");
    QCOMPARE(ends.size(), 1);
    QCOMPARE(ends.front().value("status").toString(), QStringLiteral("completed"));
    QCOMPARE(status(dir).value("state").toString(), QStringLiteral("completed"));
    QCOMPARE(events(dir, "checkpoint").size(), 2);
    for (const char* f : {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
                          "optimizer.safetensors", "trainer_state.json", "odyssey_state.json", "rng_cpu.bin"})
      QVERIFY2(QFile::exists(dir + "/checkpoints/checkpoint-100/" + f), f);
    QVERIFY(QFile::exists(dir + "/config.yaml"));
    QVERIFY(bytes(dir + "/logs/rank-0.log").contains("step 100/100"));
    // The second run tokenizes nothing: the cache has it.
    const Run again = odyssey_train({"run", "--set", "output_dir=" + tmp.filePath("out2"), "--set", "max_steps=1"});
    QCOMPARE(again.code, 0);
    QVERIFY2(again.out.contains("from the cache"), qPrintable(again.out.left(3000)));
    // TensorBoard (docs/tensorboard.md; tst_tensorboard reads the records with TensorBoard's
    // own reader): the run wrote its event file as it trained; the converter refuses to draw
    // the run twice there, and with --out writes the same records (the same bytes but for the
    // file_version record's time) from events.jsonl.
    const QStringList live = QDir(dir + "/tensorboard").entryList({"events.out.tfevents.*"}, QDir::Files);
    QCOMPARE(live.size(), 1);
    const Run twice = odyssey_train({"tensorboard", dir});
    QCOMPARE(twice.code, 1);
    QVERIFY2(twice.err.contains("TensorBoard events are already here"), qPrintable(twice.err));
    const Run conv = odyssey_train({"tensorboard", dir, "--out", tmp.filePath("tb")});
    QVERIFY2(conv.code == 0, qPrintable(conv.err));
    const QStringList made = QDir(tmp.filePath("tb")).entryList({"events.out.tfevents.*"}, QDir::Files);
    QCOMPARE(made.size(), 1);
    const QByteArray a = bytes(dir + "/tensorboard/" + live.front()), b = bytes(tmp.filePath("tb/") + made.front());
    QVERIFY(a.size() > 100 * 64);  // 100 steps of scalars, 5 evals, the config
    QCOMPARE(a.size(), b.size());
    QCOMPARE(a.mid(40), b.mid(40));  // after the first frame (12 + 24-byte Event + 4)
  }

  // A hub id trains exactly like a directory (issue 22): the quickstart model laid out in a
  // Hugging Face cache as huggingface_hub writes it (snapshots/<commit>/ of links into blobs/,
  // refs/main and a tag), found through HF_HOME, by every command that takes a model. The run
  // records the snapshot it trained and its commit, and that config.yaml validates again.
  void hubIdTrainsLikeADirectory() {
    QTemporaryDir tmp;
    const QString commit = QStringLiteral("0123456789abcdef0123456789abcdef01234567");
    const QString repo = tmp.filePath("hf/hub/models--Odyssey--Quickstart-0.5");
    const QString snap = repo + "/snapshots/" + commit;
    QDir().mkpath(repo + "/blobs");
    QDir().mkpath(snap);
    const QString model = src("resources/quickstart/model");
    int n = 0;
    for (const QString& f : QDir(model).entryList(QDir::Files)) {
      const QString blob = "blob" + QString::number(++n);
      QVERIFY(QFile::copy(model + "/" + f, repo + "/blobs/" + blob));
      QVERIFY(QFile::link("../../blobs/" + blob, snap + "/" + f));
    }
    QDir().mkpath(repo + "/refs");
    write_file(repo + "/refs/main", commit.toUtf8());
    write_file(repo + "/refs/v1", commit.toUtf8());
    for (const char* v : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "MODELSCOPE_CACHE"}) qunsetenv(v);
    const QByteArray old_home = qgetenv("HF_HOME");
    qputenv("HF_HOME", tmp.filePath("hf").toUtf8());
    struct Restore {
      QByteArray v;
      ~Restore() { v.isNull() ? qunsetenv("HF_HOME") : qputenv("HF_HOME", v); }
    } restore{old_home};

    QString text = QString::fromUtf8(bytes(lora_preset(tmp)));
    text.replace("save_steps: 3", "save_steps: 1");
    text.replace(QRegularExpression("^model: .*$", QRegularExpression::MultilineOption),
                 "model: Odyssey/Quickstart-0.5@v1");
    text.replace("max_steps: 6", "max_steps: 2");
    const QString preset = tmp.filePath("hub.yaml");
    write_file(preset, text.toUtf8());

    const Run v = odyssey_train({"validate", "--check-files", preset});
    QVERIFY2(v.code == 0, qPrintable(v.err + v.out));
    const Run plan = odyssey_train({"plan", preset});
    QVERIFY2(plan.code == 0 && plan.out.contains(snap), qPrintable(plan.err + plan.out));
    const Run r = odyssey_train({"run", preset});
    QVERIFY2(r.code == 0, qPrintable(r.err + r.out.right(2000)));
    const QString dir = run_dir(tmp.filePath("out"));
    QCOMPARE(events(dir, "step").size(), 2);
    const QByteArray config = bytes(dir + "/config.yaml");
    QVERIFY2(config.contains("# model Odyssey/Quickstart-0.5@v1: Hugging Face cache " + snap.toUtf8()),
             config.constData());
    QVERIFY2(config.contains("\nmodel: " + snap.toUtf8() + "\n"), config.constData());
    QVERIFY2(config.contains("\nmodel_revision: " + commit.toUtf8() + "\n"), config.constData());
    const Run again = odyssey_train({"validate", "--check-files", dir + "/config.yaml"});
    QVERIFY2(again.code == 0, qPrintable(again.err + again.out));

    const Run tok = odyssey_train({"tokenize", "--model", "Odyssey/Quickstart-0.5", "--text", "12+7="});
    QVERIFY2(tok.code == 0 && tok.out.startsWith('['), qPrintable(tok.err + tok.out));
    const Run direct = odyssey_train({"tokenize", "--model", model, "--text", "12+7="});
    QCOMPARE(tok.out, direct.out);
    write_file(tmp.filePath("texts.jsonl"), "{\"text\": \"3+4=7\"}\n");
    const Run score = odyssey_train({"score", "--model", "Odyssey/Quickstart-0.5@" + commit.left(7), "--data",
                                     tmp.filePath("texts.jsonl"), "--device", "cpu"});
    QVERIFY2(score.code == 0 && score.out.contains("\"total\""), qPrintable(score.err + score.out));
    const Run ex = odyssey_train({"export", dir + "/checkpoints/checkpoint-1", "--merge", "--output",
                                  tmp.filePath("merged"), "--base", "Odyssey/Quickstart-0.5"});
    QVERIFY2(ex.code == 0 && QFile::exists(tmp.filePath("merged/config.json")), qPrintable(ex.err + ex.out));

    // A revision the cache lacks fails at validate, naming what the cache holds.
    text.replace("@v1", "@v2");
    write_file(preset, text.toUtf8());
    const Run bad = odyssey_train({"validate", "--check-files", preset});
    const QString said = bad.err + bad.out;
    QCOMPARE(bad.code, 3);
    QVERIFY2(said.contains("hub.yaml:1") && said.contains("'v2'") && said.contains("refs: main, v1"), qPrintable(said));
  }

  // Validation agrees with run (issue 22): every preset of the repository and of the test
  // data that `validate --check-files` calls valid gets to its first training step, with the
  // same overrides. The shipped presets need models this machine lacks (validate refuses
  // them); the quickstart variants cover each template and tuner over a real model.
  void validFixturesReachTheFirstStep() {
    QTemporaryDir tmp;
    QStringList fixtures;
    for (const char* d : {"presets", "tests/fuzz/corpus/fuzz_preset_loader"})
      for (const QString& f : QDir(src(d)).entryList({"*.yaml"}, QDir::Files)) fixtures << src(d) + "/" + f;
    const QString quick =
        QString::fromUtf8(bytes(src("presets/quickstart.yaml"))).replace("../resources/", src("resources/") + "/");
    for (const char* tmpl : {"auto", "chatml", "qwen2_5", "qwen3", "llama3", "llama3_1"})
      for (const char* tuner : {"full", "lora"}) {
        QString t = quick;
        t.replace("template: chatml", QString("template: ") + tmpl);
        t.replace("tuner_type: full", QString("tuner_type: ") + tuner);
        const QString f = tmp.filePath(QString("quickstart-%1-%2.yaml").arg(tmpl, tuner));
        write_file(f, t.toUtf8());
        fixtures << f;
      }
    int valid = 0;
    QStringList refused;
    for (const QString& f : fixtures) {
      const QString out = tmp.filePath("out-" + QFileInfo(f).completeBaseName());
      const QStringList sets = {"--set", "max_steps=1", "--set", "output_dir=" + out};
      const Run v = odyssey_train(QStringList{"validate", "--check-files", f} + sets);
      if (v.code != 0) {
        refused << QFileInfo(f).fileName();
        continue;
      }
      ++valid;
      const Run r = odyssey_train(QStringList{"run", f} + sets);
      QVERIFY2(r.code == 0, qPrintable(f + ": validate called it valid, run failed:\n" + r.err + r.out.right(1500)));
      QCOMPARE(events(run_dir(out), "step").size(), 1);
    }
    qInfo("%d fixtures valid and trained to step 1; refused by validate: %s", valid, qPrintable(refused.join(", ")));
    // presets/quickstart.yaml and the auto (the model's own template, through the Jinja
    // engine), chatml, qwen2_5 and qwen3 variants: the templates whose tokens the quickstart
    // tokenizer has (llama3* need Llama-3's header tokens).
    QVERIFY(valid >= 9);
  }

  void resumeEqualsUninterrupted() {
    QTemporaryDir a, b;
    const Run whole = odyssey_train({"run", lora_preset(a)});
    QVERIFY2(whole.code == 0, qPrintable(whole.err + whole.out.right(2000)));
    const QString da = run_dir(a.filePath("out"));
    const QString ckpt3 = da + "/checkpoints/checkpoint-3";
    QVERIFY(QFile::exists(ckpt3 + "/adapter_model.safetensors"));
    const Run resumed = odyssey_train({"run", lora_preset(b, "resume_from_checkpoint: " + ckpt3 + "\n")});
    QVERIFY2(resumed.code == 0, qPrintable(resumed.err + resumed.out.right(2000)));
    const QString db = run_dir(b.filePath("out"));
    const auto sa = events(da, "step"), sb = events(db, "step");
    QCOMPARE(sa.size(), 6);
    QCOMPARE(sb.size(), 3);
    for (int i = 0; i < 3; ++i) {
      QCOMPARE(sb[i].value("step").toInt(), 4 + i);
      QCOMPARE(sb[i].value("loss").toDouble(), sa[3 + i].value("loss").toDouble());  // bit-identical
      QCOMPARE(sb[i].value("grad_norm").toDouble(), sa[3 + i].value("grad_norm").toDouble());
    }
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6/adapter_model.safetensors"),
             bytes(da + "/checkpoints/checkpoint-6/adapter_model.safetensors"));
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6/optimizer.safetensors"),
             bytes(da + "/checkpoints/checkpoint-6/optimizer.safetensors"));
    qInfo("resume from step 3: steps 4-6 losses and the step-6 adapter and optimizer files are identical");

    // The adapter merges into an HF directory; a second export to the same place is refused.
    const QString merged = a.filePath("merged");
    const Run ex = odyssey_train({"export", da + "/checkpoints/checkpoint-6", "--merge", "--output", merged});
    QVERIFY2(ex.code == 0, qPrintable(ex.err));
    for (const char* f : {"model.safetensors", "config.json", "tokenizer.json"})
      QVERIFY2(QFile::exists(merged + "/" + f), f);
    const Run again = odyssey_train({"export", da + "/checkpoints/checkpoint-6", "--merge", "--output", merged});
    QCOMPARE(again.code, 1);
    QVERIFY(again.err.contains("already exists"));
  }

  // Checkpoint segments through the real binary: every layer of the quickstart model (4)
  // checkpointed, one stored input per layer against one per 3 layers (segments 0-2 and 3),
  // LoRA dropout 0.1 so the rebuilt layers draw their masks again: the same losses, gradient
  // norms and adapter to the bit; the run log names the segments.
  void checkpointSegmentsTrainLikeOneInputPerLayer() {
    QTemporaryDir a, b;
    auto preset = [](const QTemporaryDir& tmp, int per_checkpoint) {
      return rewrite_preset(lora_preset(tmp, "layers_per_checkpoint: " + QString::number(per_checkpoint) + "\n"),
                            {{"activation_checkpointing: every:2\n", "activation_checkpointing: all\n"}});
    };
    const Run one = odyssey_train({"run", preset(a, 1)});
    QVERIFY2(one.code == 0, qPrintable(one.err + one.out.right(2000)));
    const Run seg = odyssey_train({"run", preset(b, 3)});
    QVERIFY2(seg.code == 0, qPrintable(seg.err + seg.out.right(2000)));
    const QString da = run_dir(a.filePath("out")), db = run_dir(b.filePath("out"));
    const auto sa = events(da, "step"), sb = events(db, "step");
    QCOMPARE(sa.size(), 6);
    QCOMPARE(sb.size(), 6);
    for (int i = 0; i < 6; ++i) {
      QCOMPARE(sb[i].value("loss").toDouble(), sa[i].value("loss").toDouble());  // bit-identical
      QCOMPARE(sb[i].value("grad_norm").toDouble(), sa[i].value("grad_norm").toDouble());
    }
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6/adapter_model.safetensors"),
             bytes(da + "/checkpoints/checkpoint-6/adapter_model.safetensors"));
    const QByteArray log = bytes(db + "/logs/rank-0.log");
    QVERIFY2(log.contains("up to 3 consecutive checkpointed layers share one stored input"),
             log.left(3000).constData());
  }

  // GaLore and Q-GaLore through the real binary (full fine-tuning, one process): the optimizer
  // state in the checkpoint (moments, projections, lazy-rule queues) resumes bit for bit, with
  // a projection refresh after the resume point (update gap 2).
  void galoreResumeEqualsUninterrupted_data() {
    QTest::addColumn<bool>("quantized");
    QTest::newRow("GaLore") << false;
    QTest::newRow("Q-GaLore") << true;
  }
  void galoreResumeEqualsUninterrupted() {
    QFETCH(bool, quantized);
    const QString galore = QString("use_galore: true\ngalore_rank: 8\ngalore_update_proj_gap: 2\ngalore_scale: 1.0\n") +
                           (quantized ? "galore_quantization: true\n" : "");
    QTemporaryDir a, b;
    const Run whole = odyssey_train({"run", lora_preset(a, galore, true)});
    QVERIFY2(whole.code == 0, qPrintable(whole.err + whole.out.right(2000)));
    const QString da = run_dir(a.filePath("out"));
    const QJsonObject opt = events(da, "run_start").front().value("optimizer").toObject();
    QCOMPARE(opt.value("name").toString(),
             quantized ? QStringLiteral("q_galore_adamw8bit") : QStringLiteral("galore_adamw"));
    QVERIFY(opt.value("state_bytes").toDouble() > 0);
    const auto sa = events(da, "step");
    QCOMPARE(sa.size(), 6);
    QVERIFY(sa.back().value("loss").toDouble() < sa.front().value("loss").toDouble());
    const QString ckpt3 = da + "/checkpoints/checkpoint-3";
    const Run resumed =
        odyssey_train({"run", lora_preset(b, galore + "resume_from_checkpoint: " + ckpt3 + "\n", true)});
    QVERIFY2(resumed.code == 0, qPrintable(resumed.err + resumed.out.right(2000)));
    const QString db = run_dir(b.filePath("out"));
    const auto sb = events(db, "step");
    QCOMPARE(sb.size(), 3);
    for (int i = 0; i < 3; ++i) QCOMPARE(sb[i].value("loss").toDouble(), sa[3 + i].value("loss").toDouble());
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6/model.safetensors"),
             bytes(da + "/checkpoints/checkpoint-6/model.safetensors"));
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6/optimizer.safetensors"),
             bytes(da + "/checkpoints/checkpoint-6/optimizer.safetensors"));
    qInfo(
        "%s: losses %.4f -> %.4f over 6 steps; resumed from step 3, steps 4-6 and the step-6 weights and optimizer "
        "state are identical",
        quantized ? "Q-GaLore" : "GaLore", sa.front().value("loss").toDouble(), sa.back().value("loss").toDouble());
  }

  // `score` on a run's validation file (alpaca records through the run's chat template, with
  // --config pointing at the run's config.yaml) equals the run's own eval loss at each
  // checkpoint: the same template, system prompt and trained tokens, the adapter's dropout off
  // (an adapter trained with lora_dropout 0.1). Without --config the model's own template and
  // no system prompt give another loss.
  void scoreOfTheValidationFileEqualsTheRunsEval() {
    QTemporaryDir a;
    const QString val = src("resources/quickstart/data/val.jsonl");
    const QString p =
        rewrite_preset(lora_preset(a, "val_dataset: [" + val + "]\n"), {{"split_dataset_ratio: 0.05\n", ""}});
    const Run run = odyssey_train({"run", p});
    QVERIFY2(run.code == 0, qPrintable(run.err + run.out.right(2000)));
    const QString d = run_dir(a.filePath("out"));
    QMap<int, double> eval;
    for (const QJsonObject& e : events(d, "eval")) eval[e.value("step").toInt()] = e.value("loss").toDouble();
    QVERIFY2(eval.contains(3) && eval.contains(6), qPrintable(QString::number(eval.size())));
    auto total = [](const Run& r) {
      const QList<QByteArray> lines = r.out.toUtf8().trimmed().split('\n');
      return QJsonDocument::fromJson(lines.back()).object().value("total").toObject();
    };
    for (int step : {3, 6}) {
      const Run s = odyssey_train({"score", "--model", src("resources/quickstart/model"), "--adapter",
                                   d + "/checkpoints/checkpoint-" + QString::number(step), "--config",
                                   d + "/config.yaml", "--data", val});
      QVERIFY2(s.code == 0, qPrintable(s.err + s.out.right(1500)));
      const QJsonObject t = total(s);
      QCOMPARE(t.value("format").toString(), QStringLiteral("alpaca"));
      QCOMPARE(t.value("template").toString(), QStringLiteral("chatml"));
      QCOMPARE(t.value("samples").toInt(), 100);
      const double loss = t.value("loss").toDouble();
      qInfo("step %d: run eval %.9f, score %.9f", step, eval[step], loss);
      QVERIFY2(std::abs(loss - eval[step]) <= 1e-6 * eval[step], qPrintable(s.out.right(400)));
    }
    // Packed (several samples a forward, each attending only to itself): every line as unpacked.
    const QStringList at6{"score",
                          "--model",
                          src("resources/quickstart/model"),
                          "--adapter",
                          d + "/checkpoints/checkpoint-6",
                          "--config",
                          d + "/config.yaml",
                          "--data",
                          val};
    const Run alone = odyssey_train(at6 + QStringList{"--pack-tokens", "0"});
    const Run packed = odyssey_train(at6 + QStringList{"--pack-tokens", "1024"});
    QVERIFY2(alone.code == 0 && packed.code == 0, qPrintable(alone.err + packed.err));
    const QList<QByteArray> la = alone.out.toUtf8().trimmed().split('\n'),
                            lp = packed.out.toUtf8().trimmed().split('\n');
    QCOMPARE(lp.size(), la.size());
    for (qsizetype i = 0; i + 1 < la.size(); ++i) {
      const QJsonObject x = QJsonDocument::fromJson(la[i]).object(), y = QJsonDocument::fromJson(lp[i]).object();
      QCOMPARE(y.value("index").toInt(), x.value("index").toInt());
      QCOMPARE(y.value("targets").toInt(), x.value("targets").toInt());
      const double want = x.value("loss").toDouble();
      QVERIFY2(std::abs(y.value("loss").toDouble() - want) <= 1e-5 * want, la[i] + " vs packed " + lp[i]);
    }
    QCOMPARE(total(packed).value("pack_tokens").toInt(), 1024);
    QVERIFY(std::abs(total(packed).value("loss").toDouble() - eval[6]) <= 1e-5 * eval[6]);
    const Run bare = odyssey_train({"score", "--model", src("resources/quickstart/model"), "--adapter",
                                    d + "/checkpoints/checkpoint-6", "--data", val});
    QVERIFY2(bare.code == 0, qPrintable(bare.err));
    QVERIFY(std::abs(total(bare).value("loss").toDouble() - eval[6]) > 1e-3);
  }

  // score's bad input: each an exit code and a message naming the file and line or flag, before
  // any model loads where it can be known.
  void scoreRefusesBadInput() {
    QTemporaryDir t;
    const QString model = src("resources/quickstart/model");
    auto write = [&](const QString& name, const QByteArray& body) {
      QFile f(t.filePath(name));
      if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write %s", qPrintable(name));
      f.write(body);
      return t.filePath(name);
    };
    const QString deep = write("deep.jsonl", "{\"text\": \"ok\"}\n" + QByteArray(100000, '[') + "\n");
    Run r = odyssey_train({"score", "--model", model, "--data", deep});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("deep.jsonl:2: error: JSON nested deeper than 256 levels"), qPrintable(r.err));
    r = odyssey_train({"score", "--model", model, "--data", deep, "--max-length", "many"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--max-length: found 'many'"), qPrintable(r.err));
    r = odyssey_train({"score", "--model", model, "--data", deep, "--pack-tokens", "-3"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--pack-tokens: found '-3'"), qPrintable(r.err));
    r = odyssey_train({"score", "--model", model, "--data", deep, "--pack-tokens", "4294967296"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--pack-tokens: found '4294967296'") && r.err.contains("2147483647"), qPrintable(r.err));
    const QString chat = write("chat.jsonl",
                               "{\"messages\": [{\"role\": \"user\", \"content\": \"2+3?\"}, "
                               "{\"role\": \"assistant\", \"content\": \"5\"}]}\n");
    const QString bad_template = write("bad.jinja", "{% for m in messages %}{{ m.content }}\n{% endfor\n");
    r = odyssey_train({"score", "--model", model, "--data", chat, "--template-file", bad_template});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("bad.jinja"), qPrintable(r.err));
    const QString broken = write("broken.jsonl", "{\"messages\": [{\"role\": \"user\"}]}\nnot json\n");
    r = odyssey_train({"score", "--model", model, "--data", broken});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("broken.jsonl"), qPrintable(r.err));
    // Raw text ignores the template flags, and says so.
    const QString text = write("text.jsonl", "{\"text\": \"What is 2 + 3? 5\"}\n");
    r = odyssey_train({"score", "--model", model, "--data", text, "--system", "x"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY2(r.err.contains("--system applies to conversations"), qPrintable(r.err));
    // ... but not about --config: a run's config.yaml (the Evaluate page passes it for any file)
    // holds only conversation settings.
    r = odyssey_train({"score", "--model", model, "--data", text, "--config", src("presets/quickstart.yaml")});
    QVERIFY2(r.code == 0 && !r.err.contains("applies to conversations"), qPrintable(r.err));
    // A conversation dropped for its length leaves a gap in the indices: each line's index is
    // its sample's place in the file, as its origin says.
    const QByteArray turn =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"2+3?\"}, "
        "{\"role\": \"assistant\", \"content\": \"5\"}]}\n";
    const QString gap =
        write("gap.jsonl", turn + "{\"messages\": [{\"role\": \"user\", \"content\": \"" + QByteArray(400, 'x') +
                               "\"}, {\"role\": \"assistant\", "
                               "\"content\": \"5\"}]}\n" +
                               turn);
    r = odyssey_train({"score", "--model", model, "--data", gap, "--max-length", "64"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QList<int> indices;
    QStringList origins;
    for (const QString& line : r.out.split('\n')) {
      const QJsonObject o = QJsonDocument::fromJson(line.toUtf8()).object();
      if (o.contains("index")) indices << o["index"].toInt(), origins << o["origin"].toString();
    }
    QCOMPARE(indices, (QList<int>{0, 2}));
    QVERIFY2(origins.size() == 2 && origins[1].endsWith("gap.jsonl:3"), qPrintable(origins.join(", ")));
  }

  // optimizer_dtype: fp32 through the real binary: a full fine-tune of bf16 weights on one
  // process keeps fp32 master weights, moments and gradients (ZeRO-2's optimizer over a group of
  // one, 16 bytes per parameter); the checkpoint holds them, so a run resumed from step 3 equals
  // the uninterrupted one to the bit (weights and optimizer file), which it could not if it
  // restarted from the rounded bf16 weights.
  void fp32MasterWeightsResumeEqualsUninterrupted() {
    auto preset = [](const QTemporaryDir& tmp, const QString& extra) {
      return rewrite_preset(lora_preset(tmp, "optimizer_dtype: fp32\nlearning_rate: 0.0001\n" + extra, true),
                            {{"torch_dtype: float32\n", "torch_dtype: bfloat16\n"}, {"learning_rate: 0.005\n", ""}});
    };
    QTemporaryDir a, b;
    const Run whole = odyssey_train({"run", preset(a, {})});
    QVERIFY2(whole.code == 0, qPrintable(whole.err + whole.out.right(2000)));
    const QString da = run_dir(a.filePath("out"));
    const QJsonObject start = events(da, "run_start").front();
    const QJsonObject opt = start.value("optimizer").toObject();
    QCOMPARE(opt.value("name").toString(), QStringLiteral("adamw_fp32_master"));
    QCOMPARE(opt.value("sharded_over").toInt(), 1);
    const double trainable = start.value("model").toObject().value("trainable_params").toDouble();
    QVERIFY(trainable > 0);
    QCOMPARE(opt.value("state_bytes").toDouble(), 16 * trainable + 4);  // fp32 master, m, v, gradients; the step
    QVERIFY2(bytes(da + "/logs/rank-0.log").contains("optimizer_dtype fp32: fp32 master weights"),
             bytes(da + "/logs/rank-0.log").left(3000).constData());
    const QString ckpt3 = da + "/checkpoints/checkpoint-3";
    const QString state = "/optimizer-rank-00000-of-00001.safetensors";
    QVERIFY(QFile::exists(ckpt3 + state));
    const Run resumed = odyssey_train({"run", preset(b, "resume_from_checkpoint: " + ckpt3 + "\n")});
    QVERIFY2(resumed.code == 0, qPrintable(resumed.err + resumed.out.right(2000)));
    const QString db = run_dir(b.filePath("out"));
    const auto sa = events(da, "step"), sb = events(db, "step");
    QCOMPARE(sa.size(), 6);
    QCOMPARE(sb.size(), 3);
    for (int i = 0; i < 3; ++i) {
      QCOMPARE(sb[i].value("loss").toDouble(), sa[3 + i].value("loss").toDouble());
      QCOMPARE(sb[i].value("grad_norm").toDouble(), sa[3 + i].value("grad_norm").toDouble());
    }
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6/model.safetensors"),
             bytes(da + "/checkpoints/checkpoint-6/model.safetensors"));
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6" + state), bytes(da + "/checkpoints/checkpoint-6" + state));
  }

  void galoreRankTooLargeFailsBeforeTraining() {
    QTemporaryDir a;
    // Validation knows the model's shapes (config.json): refused before anything loads.
    const Run r = odyssey_train({"run", lora_preset(a, "use_galore: true\ngalore_rank: 4096\n", true)});
    QCOMPARE(r.code, 3);
    QVERIFY2(r.out.contains("galore_rank") || r.err.contains("galore_rank"), qPrintable(r.out.right(1500) + r.err));
    QVERIFY(QDir(a.filePath("out")).isEmpty() || events(run_dir(a.filePath("out")), "step").isEmpty());
  }

  void resumeRefusesOtherData() {
    QTemporaryDir a, b;
    QCOMPARE(odyssey_train({"run", lora_preset(a)}).code, 0);
    const QString ckpt3 = run_dir(a.filePath("out")) + "/checkpoints/checkpoint-3";
    const Run r = odyssey_train({"run", lora_preset(b, "resume_from_checkpoint: " + ckpt3 + "\n"), "--set", "seed=7"});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.out.contains("resume needs the same setting"), qPrintable(r.out.right(1500)));
  }

  void sigtermStopsAfterACheckpoint() {
    QTemporaryDir tmp;
    QProcess p;
    p.setProgram(QStringLiteral(ODYSSEY_TRAIN_BIN));
    p.setArguments({"run", lora_preset(tmp), "--set", "max_steps=100000", "--set", "save_steps=100000"});
    p.start();
    QVERIFY(p.waitForStarted());
    QByteArray seen;
    QElapsedTimer t;
    t.start();
    while (!seen.contains("step 2/") && t.elapsed() < 120000) {
      p.waitForReadyRead(1000);
      seen += p.readAllStandardOutput();
    }
    QVERIFY2(seen.contains("step 2/"), seen.right(2000).constData());
    ::kill(static_cast<pid_t>(p.processId()), SIGTERM);
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    const QString dir = run_dir(tmp.filePath("out"));
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QStringLiteral("stopped"));
    const int step = st.value("step").toInt();
    QVERIFY(step >= 2);
    QVERIFY(QFile::exists(dir + "/checkpoints/checkpoint-" + QString::number(step) + "/adapter_model.safetensors"));
    const auto ends = events(dir, "run_end");
    QCOMPARE(ends.size(), 1);
    QCOMPARE(ends.front().value("status").toString(), QStringLiteral("stopped"));
    QVERIFY(ends.front().value("reason").toString().contains("resume_from_checkpoint"));
  }

  void nanLossFails() {
    QTemporaryDir tmp;
    // Full fine-tuning at learning rate 10 without clipping overflows within a few steps.
    const Run r = odyssey_train({"run", lora_preset(tmp, {}, true), "--set", "learning_rate=10", "--set",
                                 "max_grad_norm=0", "--set", "max_steps=60"});
    QCOMPARE(r.code, 1);
    const QString dir = run_dir(tmp.filePath("out"));
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QStringLiteral("failed"));
    QVERIFY2(st.value("reason").toString().contains(QRegularExpression("NaN|infinite")),
             qPrintable(st.value("reason").toString()));
    QCOMPARE(events(dir, "warning").last().value("code").toString(), QStringLiteral("nan_loss"));
  }

  void badDataFailsWithTheFile() {
    QTemporaryDir tmp;
    const QString data = tmp.filePath("broken.jsonl");
    QFile f(data);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"messages\": 3}\nnot json\n{\"instruction\": 5}\n");
    f.close();
    // Refused by run's own check of the files, before a run directory or the model exists
    // (what `validate --check-files` and the window's Start say too), each record named.
    const Run r = odyssey_train({"run", lora_preset(tmp), "--set", "dataset=[" + data + "]"});
    QCOMPARE(r.code, 3);
    QVERIFY2(r.err.contains("broken.jsonl:1") && r.err.contains("broken.jsonl:2") && r.err.contains("broken.jsonl:3"),
             qPrintable(r.err.right(2500)));
    QVERIFY2(r.err.contains("nothing was started"), qPrintable(r.err.right(500)));
    QVERIFY(QDir(tmp.filePath("out")).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty());
    const Run v = odyssey_train({"validate", "--check-files", lora_preset(tmp), "--set", "dataset=[" + data + "]"});
    QCOMPARE(v.code, 3);
  }

  // A failed run says so on stderr (docs/cli.md: diagnostics go to standard error), not
  // only in the training log on stdout.
  void failureIsReportedOnStderr() {
    QTemporaryDir tmp;
    // Data that passes the file check but leaves nothing once tokenized (every sample longer
    // than max_length, dropped): the run starts, then fails.
    const Run r = odyssey_train({"run", lora_preset(tmp), "--set", "max_length=16", "--set", "packing=false", "--set",
                                 "truncation_strategy=delete"});
    qInfo("failed run: exit %d; stderr: %s", r.code, qPrintable(r.err.trimmed().right(400)));
    QCOMPARE(r.code, 1);
    const QString reason = status(run_dir(tmp.filePath("out"))).value("reason").toString();
    QVERIFY(!reason.isEmpty());
    QVERIFY2(r.err.contains("the run failed") && r.err.contains(reason.left(200)), qPrintable(r.err));
    QVERIFY2(r.err.contains("no sample is left"), qPrintable(r.err));
  }

  // --run-dir belongs to the ranks of a parallel run; anywhere else it is a usage error
  // (exit 2), said on stderr, and nothing is created.
  void runDirOutsideAParallelRunIsAUsageError() {
    QTemporaryDir tmp;
    const QString dir = tmp.filePath("not-a-run");
    const Run r = odyssey_train({"run", lora_preset(tmp), "--run-dir", dir});
    qInfo("--run-dir without RANK/WORLD_SIZE: exit %d; stderr: %s", r.code, qPrintable(r.err.trimmed()));
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--run-dir"), qPrintable(r.err));
    QVERIFY(!QFileInfo::exists(dir));
    QVERIFY(!QFileInfo::exists(tmp.filePath("out")) || QDir(tmp.filePath("out")).isEmpty());
  }

  void outputDirThatIsAFile() {
    QTemporaryDir tmp;
    QFile f(tmp.filePath("file"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.close();
    const Run r = odyssey_train({"run", lora_preset(tmp), "--set", "output_dir=" + tmp.filePath("file")});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(tmp.filePath("file")), qPrintable(r.err));
  }

  // A file of the run directory replaced while the run trains (at step 3): the next write to
  // it fails, and the run ends "failed" with the reason in the outputs that still work, printed
  // once to stderr. Before: the writers kept writing into the renamed file (or ignored the
  // error) and the run ended "completed", exit 0.
  void replacedRunFileFailsTheRun_data() {
    QTest::addColumn<QStringList>("files");    // relative to the run directory
    QTest::addColumn<QString>("replacement");  // "dir" or a symlink target
    QTest::addColumn<QString>("named");        // what the reason names (a pattern)
    QTest::newRow("events.jsonl -> /dev/full") << QStringList{"events.jsonl"} << "/dev/full"
                                               << "events.jsonl";
    QTest::newRow("events.jsonl -> directory") << QStringList{"events.jsonl"} << "dir"
                                               << "events.jsonl";
    QTest::newRow("status.json -> directory") << QStringList{"status.json"} << "dir"
                                              << "status.json";
    QTest::newRow("rank-0.log -> /dev/full") << QStringList{"logs/rank-0.log"} << "/dev/full"
                                             << "rank-0.log";
    QTest::newRow("events and status -> directories") << QStringList{"events.jsonl", "status.json"} << "dir"
                                                      << "events.jsonl|status.json";  // whichever fails first
  }
  void replacedRunFileFailsTheRun() {
    QFETCH(QStringList, files);
    QFETCH(QString, replacement);
    QFETCH(QString, named);
    QTemporaryDir tmp;
    LiveRun run;
    run.start({"run", lora_preset(tmp), "--set", "max_steps=100000", "--set", "save_steps=100000"},
              tmp.filePath("out"));
    const QString dir = run.dir();
    QVERIFY(!dir.isEmpty());
    QVERIFY(run.wait_for_step(dir, 3));
    for (const QString& f : files) {
      const QString path = dir + "/" + f;
      QVERIFY(QFile::rename(path, path + ".before"));  // kept, to check it has no half line
      if (replacement == "dir") {
        QVERIFY(QDir().mkpath(path + "/inside"));  // not empty: rename(2) cannot replace it
      } else {
        QVERIFY(QFile::link(replacement, path));
      }
    }
    // status.json fails at its next heartbeat (every 5 s); the others at the next step.
    const std::optional<int> code = run.finish(60000);
    QVERIFY2(code.has_value(), "the run went on after its output failed");
    QCOMPARE(*code, 1);
    const QString err = run.err();
    QCOMPARE(err.count("odyssey-train: failed: "), 1);
    const QRegularExpression names(named);
    QVERIFY2(err.contains(names), qPrintable(err));
    const bool events_work = !files.contains("events.jsonl");
    const bool status_works = !files.contains("status.json");
    if (status_works) {
      const QJsonObject st = status(dir);
      QCOMPARE(st.value("state").toString(), QStringLiteral("failed"));
      QVERIFY2(st.value("reason").toString().contains(names), qPrintable(st.value("reason").toString()));
      QCOMPARE(st.value("exit_code").toInt(), 1);
    }
    const QString events_file = dir + (events_work ? "/events.jsonl" : "/events.jsonl.before");
    QString why;
    QVERIFY2(whole_json_lines(events_file, &why), qPrintable(why));
    QFile ef(events_file);
    QVERIFY(ef.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = ef.readAll().trimmed().split('\n');
    QCOMPARE(QJsonDocument::fromJson(lines.front()).object().value("type").toString(), QStringLiteral("run_start"));
    const QJsonObject last = QJsonDocument::fromJson(lines.back()).object();
    if (events_work) {
      QCOMPARE(last.value("type").toString(), QStringLiteral("run_end"));
      QCOMPARE(last.value("status").toString(), QStringLiteral("failed"));
      QVERIFY2(last.value("reason").toString().contains(names), qPrintable(last.value("reason").toString()));
    } else {
      QVERIFY(last.value("type").toString() != "run_end");
    }
    qInfo("%s replaced at step 3: exit 1 after %.1f s; %s", qPrintable(files.join('+')),
          static_cast<double>(run.clock.elapsed()) / 1000.0, qPrintable(err.trimmed().left(300)));
  }

  // RLIMIT_FSIZE set on the running process just past events.jsonl's end (a real short write,
  // then EFBIG, as a disk filling up gives ENOSPC): the event line the kernel cut is taken back,
  // status.json says "failed" with the reason, exit 1. Before: events.jsonl kept a half line,
  // status.json said "running", and the run went on or died of SIGXFSZ.
  void fileSizeLimitLeavesNoHalfLine() {
    QTemporaryDir tmp;
    LiveRun run;
    run.start({"run", lora_preset(tmp), "--set", "max_steps=100000", "--set", "save_steps=100000"},
              tmp.filePath("out"));
    const QString dir = run.dir();
    QVERIFY(!dir.isEmpty());
    QVERIFY(run.wait_for_step(dir, 3));
    const qint64 size = QFileInfo(dir + "/events.jsonl").size();
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(size + 16);
    QVERIFY2(::prlimit(static_cast<pid_t>(run.p.processId()), RLIMIT_FSIZE, &lim, nullptr) == 0, std::strerror(errno));
    const std::optional<int> code = run.finish(60000);
    QVERIFY2(code.has_value(), "the run went on after its writes failed");
    QCOMPARE(*code, 1);
    QString why;
    QVERIFY2(whole_json_lines(dir + "/events.jsonl", &why), qPrintable(why));
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QStringLiteral("failed"));
    QVERIFY2(st.value("reason").toString().contains("File too large"), qPrintable(st.value("reason").toString()));
    QCOMPARE(run.err().count("odyssey-train: failed: "), 1);
    qInfo("RLIMIT_FSIZE %lld at step 3: exit 1, status failed: %s", static_cast<long long>(size + 16),
          qPrintable(st.value("reason").toString().left(200)));
  }

  // An existing checkpoint-N is never deleted or replaced: a directory of that name made by
  // someone else before the run saves step 3 fails the save and the run, naming it, and keeps
  // its contents. Before: it was deleted and replaced, exit 0.
  void existingCheckpointIsNeverReplaced() {
    QTemporaryDir tmp;
    LiveRun run;
    run.start({"run", lora_preset(tmp)}, tmp.filePath("out"));
    const QString dir = run.dir();
    QVERIFY(!dir.isEmpty());
    // After the run directory is complete (its subdirectories made, the trainer started).
    QElapsedTimer t;
    t.start();
    while (!QFile::exists(dir + "/events.jsonl") && t.elapsed() < 120000) QThread::msleep(10);
    QVERIFY(QFile::exists(dir + "/events.jsonl"));
    const QString theirs = dir + "/checkpoints/checkpoint-3";
    QVERIFY(QDir().mkpath(theirs));
    write_file(theirs + "/precious.txt", "not the run's");
    const std::optional<int> code = run.finish(240000);
    QVERIFY(code.has_value());
    QCOMPARE(*code, 1);
    QCOMPARE(bytes(theirs + "/precious.txt"), QByteArray("not the run's"));
    QVERIFY(!QFile::exists(theirs + "/trainer_state.json"));
    QVERIFY(!QFile::exists(theirs + "/odyssey_state.json"));
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QStringLiteral("failed"));
    QVERIFY2(st.value("reason").toString().contains(theirs) && st.value("reason").toString().contains("already exists"),
             qPrintable(st.value("reason").toString()));
    QCOMPARE(events(dir).front().value("type").toString(), QStringLiteral("run_start"));
    QVERIFY(QDir(dir + "/checkpoints").entryList(QDir::Dirs | QDir::NoDotAndDotDot | QDir::Hidden).size() == 1);
  }

  // Hugging Face-compatible checkpoints (issue 25): trainer_state.json is transformers'
  // TrainerState — its own load_from_json reads it, with global_step, max_steps and a
  // log_history holding every logged step's loss, learning rate and grad norm and every
  // eval's loss as events.jsonl has them; Odyssey's own state is odyssey_state.json. A resumed
  // run carries the history on. An HF Trainer checkpoint given to resume_from_checkpoint is
  // refused by validate (exit 3) and by run, naming the file; before, validate called it
  // valid and run failed after loading the model with ten errors.
  void checkpointsAreHuggingFaceCompatible() {
    const QString python = QStringLiteral(ODYSSEY_PYTHON);
    if (python.isEmpty()) QSKIP("ODYSSEY_PYTHON is empty: configure with the reference venv's python (transformers)");
    QTemporaryDir a;
    const Run whole = odyssey_train({"run", lora_preset(a)});  // logs every step, evals at 3 and 6
    QVERIFY2(whole.code == 0, qPrintable(whole.err + whole.out.right(2000)));
    const QString dir = run_dir(a.filePath("out"));
    auto oracle = [&](const QString& ckpt) {
      QProcess p;
      p.start(python, {QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/hf_trainer_state_oracle.py"), ckpt});
      const bool ran = p.waitForFinished(120000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
      const QByteArray out = p.readAllStandardOutput(), err = p.readAllStandardError();
      if (!ran) qWarning("oracle: %s", err.constData());
      return ran ? QJsonDocument::fromJson(out).object() : QJsonObject();
    };
    const QJsonObject hf = oracle(dir + "/checkpoints/checkpoint-6");
    QVERIFY(!hf.isEmpty());
    QCOMPARE(hf.value("global_step").toInt(), 6);
    QCOMPARE(hf.value("max_steps").toInt(), 6);
    QCOMPARE(hf.value("logging_steps").toInt(), 1);
    QCOMPARE(hf.value("save_steps").toInt(), 3);
    // The log history against events.jsonl: every step event (logged steps) and eval event.
    const QJsonArray log = hf.value("log_history").toArray();
    const auto steps = events(dir, "step"), evals = events(dir, "eval");
    QCOMPARE(log.size(), steps.size() + evals.size());
    int si = 0, ei = 0;
    for (const QJsonValue& v : log) {
      const QJsonObject x = v.toObject();
      if (x.contains("eval_loss")) {
        const QJsonObject e = evals.at(ei++);
        QCOMPARE(x.value("step").toInt(), e.value("step").toInt());
        QCOMPARE(x.value("eval_loss").toDouble(), e.value("loss").toDouble());
      } else {
        const QJsonObject e = steps.at(si++);
        QCOMPARE(x.value("step").toInt(), e.value("step").toInt());
        QCOMPARE(x.value("loss").toDouble(), e.value("loss").toDouble());
        QCOMPARE(x.value("learning_rate").toDouble(), e.value("lr").toDouble());
        QCOMPARE(x.value("grad_norm").toDouble(), e.value("grad_norm").toDouble());
      }
    }
    QCOMPARE(si, steps.size());
    QCOMPARE(ei, evals.size());
    // Resumed from checkpoint-3: the new run's checkpoint-6 holds the whole history again.
    QTemporaryDir b;
    const Run resumed =
        odyssey_train({"run", lora_preset(b, "resume_from_checkpoint: " + dir + "/checkpoints/checkpoint-3\n")});
    QVERIFY2(resumed.code == 0, qPrintable(resumed.err + resumed.out.right(2000)));
    const QJsonObject again = oracle(run_dir(b.filePath("out")) + "/checkpoints/checkpoint-6");
    QCOMPARE(again.value("global_step").toInt(), 6);
    QCOMPARE(again.value("log_history").toArray().size(), log.size());
    QCOMPARE(again.value("log_history").toArray().first().toObject().value("step").toInt(), 1);
    QVERIFY(evals.size() >= 2);

    // An HF Trainer checkpoint (trainer_state.json as transformers writes it, PEFT adapter
    // files beside it): validate refuses it, naming the file; run refuses it before training.
    const QString theirs = a.filePath("hf-checkpoint-500");
    QVERIFY(QDir().mkpath(theirs));
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
      QFile::copy(dir + "/checkpoints/checkpoint-6/" + f, theirs + "/" + f);
    write_file(
        theirs + "/trainer_state.json",
        R"({"best_metric": null, "epoch": 1.0, "global_step": 500, "log_history": [{"epoch": 0.5, "loss": 1.2, "step": 250}],
                   "logging_steps": 10, "max_steps": 500, "save_steps": 500, "train_batch_size": 4})");
    const QString preset = lora_preset(b, "resume_from_checkpoint: " + theirs + "\n");
    const Run v = odyssey_train({"validate", preset});
    QCOMPARE(v.code, 3);
    QVERIFY2((v.out + v.err).contains(theirs + "/trainer_state.json") &&
                 (v.out + v.err).contains("a Hugging Face Trainer checkpoint"),
             qPrintable(v.out + v.err));
    const Run r = odyssey_train({"run", preset});
    QCOMPARE(r.code, 3);
    QVERIFY2((r.out + r.err).contains("a Hugging Face Trainer checkpoint"), qPrintable(r.out + r.err));
  }

  // adapters: (ms-swift's --adapters) starts a new run from an existing PEFT adapter: with a
  // learning rate of 1e-30 (no fp32 weight moves) the new run's checkpoint holds exactly the adapter it started from,
  // and its first step's loss is the trained adapter's, below the fresh one's on the same batch. An adapter of another
  // rank is refused by validate, naming both settings. report_to: [none] writes no TensorBoard files.
  void adaptersStartFromAnExistingAdapter() {
    QTemporaryDir a;
    const Run first = odyssey_train({"run", lora_preset(a)});
    QVERIFY2(first.code == 0, qPrintable(first.err + first.out.right(2000)));
    const QString from = run_dir(a.filePath("out")) + "/checkpoints/checkpoint-6";
    QTemporaryDir b;
    const Run cont = odyssey_train({"run", lora_preset(b, "adapters: [" + from + "]\nreport_to: [none]\n"), "--set",
                                    "learning_rate=1e-30", "--set", "max_steps=1", "--set", "save_steps=1", "--set",
                                    "warmup_steps=0"});
    QVERIFY2(cont.code == 0, qPrintable(cont.err + cont.out.right(2000)));
    QVERIFY2(cont.out.contains("adapter weights loaded from " + from), qPrintable(cont.out.right(2000)));
    const QString dir = run_dir(b.filePath("out"));
    QCOMPARE(bytes(dir + "/checkpoints/checkpoint-1/adapter_model.safetensors"),
             bytes(from + "/adapter_model.safetensors"));
    const double fresh = events(run_dir(a.filePath("out")), "step").front().value("loss").toDouble();
    const double continued = events(dir, "step").front().value("loss").toDouble();
    QVERIFY2(continued < fresh - 0.1,
             qPrintable(QString("first-step loss %1 from the adapter, %2 fresh").arg(continued).arg(fresh)));
    QVERIFY(QDir(dir + "/tensorboard").entryList({"events.out.tfevents.*"}, QDir::Files).isEmpty());
    QVERIFY(
        !QDir(run_dir(a.filePath("out")) + "/tensorboard").entryList({"events.out.tfevents.*"}, QDir::Files).isEmpty());

    QTemporaryDir c;
    const QString other = lora_preset(c, "adapters: [" + from + "]\n");
    const Run v = odyssey_train({"validate", other, "--set", "lora_rank=8"});
    QCOMPARE(v.code, 3);
    QVERIFY2((v.out + v.err)
                 .contains("adapter_config.json was trained with other LoRA settings; set lora_rank: 4 "
                           "(the preset has 8)"),
             qPrintable(v.out + v.err));
  }

  // Resume checks the checkpoint before loading it: an unfinished `.tmp-` save, a step outside
  // the schedule, a file truncated or changed since the save are refused naming the file, the
  // key and what was expected. Before: all four trained (1e15 printed "-999999999999990 steps
  // to go" and exited "completed").
  void resumeRefusesUnfinishedForgedOrAlteredCheckpoints() {
    QTemporaryDir a;
    const Run whole = odyssey_train({"run", lora_preset(a)});
    QVERIFY2(whole.code == 0, qPrintable(whole.err + whole.out.right(2000)));
    const QString ckpt3 = run_dir(a.filePath("out")) + "/checkpoints/checkpoint-3";
    const QJsonObject saved = QJsonDocument::fromJson(bytes(ckpt3 + "/odyssey_state.json")).object();
    QVERIFY(saved.value("files").toObject().contains("adapter_model.safetensors"));
    QVERIFY(saved.value("files").toObject().contains("trainer_state.json"));  // HF's file is checked too

    struct Case {
      QString name, dir;
      QStringList expected;  // all in the output
    };
    QList<Case> cases;
    const QString base = a.filePath("variants");
    // 1. The temporary directory of a save (as a crash leaves it).
    const QString unfinished = base + "/checkpoints/checkpoint-3.tmp-4242";
    copy_dir(ckpt3, unfinished);
    cases.append({"unfinished", unfinished, {"checkpoint-3.tmp-4242", "did not finish"}});
    // 2. step far beyond the schedule.
    const QString forged = base + "/forged/checkpoint-3";
    copy_dir(ckpt3, forged);
    QJsonObject state = saved;
    state["step"] = 1e15;
    write_file(forged + "/odyssey_state.json", QJsonDocument(state).toJson());
    cases.append({"step 1e15", forged, {"odyssey_state.json", "step", "1000000000000000", "from 0 to 6"}});
    // 3. One byte of the adapter changed (same size).
    const QString flipped = base + "/flipped/checkpoint-3";
    copy_dir(ckpt3, flipped);
    QByteArray adapter = bytes(flipped + "/adapter_model.safetensors");
    adapter[adapter.size() - 5] = static_cast<char>(adapter[adapter.size() - 5] ^ 0x40);
    write_file(flipped + "/adapter_model.safetensors", adapter);
    cases.append(
        {"byte changed", flipped, {"adapter_model.safetensors", "files.adapter_model.safetensors.checksum64"}});
    // 4. The optimizer state cut short.
    const QString cut = base + "/cut/checkpoint-3";
    copy_dir(ckpt3, cut);
    write_file(cut + "/optimizer.safetensors", bytes(cut + "/optimizer.safetensors").left(1000));
    cases.append({"truncated", cut, {"optimizer.safetensors", "files.optimizer.safetensors.bytes", "1000"}});

    for (const Case& k : cases) {
      QTemporaryDir b;
      const Run r = odyssey_train({"run", lora_preset(b, "resume_from_checkpoint: " + k.dir + "\n")});
      const QString all = r.out + r.err;
      qInfo("resume from %s: exit %d; %s", qPrintable(k.name), r.code,
            qPrintable(all.mid(all.indexOf("failed: "), 400).trimmed()));
      QCOMPARE(r.code, 1);
      for (const QString& e : k.expected)
        QVERIFY2(all.contains(e), qPrintable(k.name + ": no " + e + " in\n" + all.right(2000)));
      QVERIFY(events(run_dir(b.filePath("out")), "step").isEmpty());
    }
  }

  // SIGTERM while a dataset of 200,000 samples is being tokenized: the run
  // stops within a block of samples, "stopped", exit 0, saying there is nothing to resume.
  // Before: the signal was honoured only after tokenization (seconds later).
  void sigtermDuringTokenizationStopsPromptly() {
    QTemporaryDir tmp;
    const QString data = tmp.filePath("big.jsonl");
    {
      QFile f(data);
      QVERIFY(f.open(QIODevice::WriteOnly));
      const QByteArray filler = QByteArray("the quick brown fox jumps over the lazy dog ").repeated(3);
      for (int i = 0; i < 200000; ++i)
        f.write("{\"messages\": [{\"role\": \"user\", \"content\": \"" + filler + QByteArray::number(i) +
                "\"}, {\"role\": \"assistant\", \"content\": \"" + QByteArray::number(i * 7) + "\"}]}\n");
    }
    LiveRun run;
    run.start({"run", lora_preset(tmp), "--set", "dataset=[" + data + "]", "--set", "split_dataset_ratio=0",
               "--no-token-cache"},
              tmp.filePath("out"));
    QByteArray seen;
    while (!seen.contains("[tokenize]") && run.clock.elapsed() < 180000 && run.p.state() == QProcess::Running) {
      run.p.waitForReadyRead(100);
      seen += run.p.readAllStandardOutput();
    }
    QVERIFY2(seen.contains("[tokenize]"), seen.right(2000).constData());
    QThread::msleep(300);  // well into tokenization
    QVERIFY(run.p.state() == QProcess::Running);
    QElapsedTimer since;
    since.start();
    ::kill(static_cast<pid_t>(run.p.processId()), SIGTERM);
    const std::optional<int> code = run.finish(120000);
    const double stop_s = static_cast<double>(since.elapsed()) / 1000.0;
    QVERIFY(code.has_value());
    qInfo("SIGTERM during tokenization: exit %d %.2f s after the signal", *code, stop_s);
    QCOMPARE(*code, 0);
    QVERIFY2(stop_s < 2.5, qPrintable(QString::number(stop_s)));
    const QString dir = run.dir();
    const QJsonObject st = status(dir);
    QCOMPARE(st.value("state").toString(), QStringLiteral("stopped"));
    QVERIFY2(st.value("reason").toString().contains("no checkpoint"), qPrintable(st.value("reason").toString()));
    const auto all = events(dir);
    QCOMPARE(all.front().value("type").toString(), QStringLiteral("run_start"));
    QCOMPARE(all.back().value("type").toString(), QStringLiteral("run_end"));
    QCOMPARE(all.back().value("status").toString(), QStringLiteral("stopped"));
    QVERIFY(events(dir, "step").isEmpty());
  }
};

QTEST_GUILESS_MAIN(TstTrainRun)
#include "tst_train_run.moc"
