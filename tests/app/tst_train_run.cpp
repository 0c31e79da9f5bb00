// `odyssey-train run` as users run it: a real process training the bundled tiny model on the
// CPU, and what it leaves in the run directory (docs/run-contract.md): the quickstart's
// loss falls; a resumed run equals an uninterrupted one bit for bit; SIGTERM stops after a
// checkpoint with exit 0; a NaN loss and bad data fail with status "failed" and a reason;
// a LoRA checkpoint exports merged.
#include <QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

#include <csignal>

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
  if (runs.size() != 1) qFatal("expected one run directory in %s, found %lld", qPrintable(output), static_cast<long long>(runs.size()));
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
  const QString text = "model: " + src("resources/quickstart/model") +
                       "\n"
                       "template: chatml\n"
                       "system: \"You answer with the result only.\"\n"
                       "dataset: [" + src("resources/quickstart/data/train.jsonl") + "#400]\n"
                       "split_dataset_ratio: 0.05\n"
                       "max_length: 128\n"
                       "packing: true\n"
                       + QString(full ? "tuner_type: full\n"
                                      : "tuner_type: lora\nlora_rank: 4\nlora_alpha: 8\nlora_dropout: 0.1\n") +
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
                       "output_dir: " + tmp.filePath("out") + "\n" + extra;
  f.write(text.toUtf8());
  return p;
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
    qInfo("quickstart: 100 steps in %.1f s (process wall time); loss %.4f at step 1, %.4f at step 100, mean of "
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
                          "optimizer.safetensors", "trainer_state.json", "rng_cpu.bin"})
      QVERIFY2(QFile::exists(dir + "/checkpoints/checkpoint-100/" + f), f);
    QVERIFY(QFile::exists(dir + "/config.yaml"));
    QVERIFY(bytes(dir + "/logs/rank-0.log").contains("step 100/100"));
    // The second run tokenizes nothing: the cache has it.
    const Run again = odyssey_train({"run", "--set", "output_dir=" + tmp.filePath("out2"), "--set", "max_steps=1"});
    QCOMPARE(again.code, 0);
    QVERIFY2(again.out.contains("from the cache"), qPrintable(again.out.left(3000)));
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
      QCOMPARE(sb[i].value("loss").toDouble(), sa[3 + i].value("loss").toDouble());      // bit-identical
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
    QCOMPARE(opt.value("name").toString(), quantized ? QStringLiteral("q_galore_adamw8bit") : QStringLiteral("galore_adamw"));
    QVERIFY(opt.value("state_bytes").toDouble() > 0);
    const auto sa = events(da, "step");
    QCOMPARE(sa.size(), 6);
    QVERIFY(sa.back().value("loss").toDouble() < sa.front().value("loss").toDouble());
    const QString ckpt3 = da + "/checkpoints/checkpoint-3";
    const Run resumed = odyssey_train({"run", lora_preset(b, galore + "resume_from_checkpoint: " + ckpt3 + "\n", true)});
    QVERIFY2(resumed.code == 0, qPrintable(resumed.err + resumed.out.right(2000)));
    const QString db = run_dir(b.filePath("out"));
    const auto sb = events(db, "step");
    QCOMPARE(sb.size(), 3);
    for (int i = 0; i < 3; ++i) QCOMPARE(sb[i].value("loss").toDouble(), sa[3 + i].value("loss").toDouble());
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6/model.safetensors"), bytes(da + "/checkpoints/checkpoint-6/model.safetensors"));
    QCOMPARE(bytes(db + "/checkpoints/checkpoint-6/optimizer.safetensors"),
             bytes(da + "/checkpoints/checkpoint-6/optimizer.safetensors"));
    qInfo("%s: losses %.4f -> %.4f over 6 steps; resumed from step 3, steps 4-6 and the step-6 weights and optimizer "
          "state are identical",
          quantized ? "Q-GaLore" : "GaLore", sa.front().value("loss").toDouble(), sa.back().value("loss").toDouble());
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
    const Run r = odyssey_train(
        {"run", lora_preset(tmp, {}, true), "--set", "learning_rate=10", "--set", "max_grad_norm=0", "--set", "max_steps=60"});
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
    const Run r = odyssey_train({"run", lora_preset(tmp), "--set", "dataset=[" + data + "]"});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.out.contains("broken.jsonl:1") && r.out.contains("broken.jsonl:2"), qPrintable(r.out.right(2500)));
    QCOMPARE(status(run_dir(tmp.filePath("out"))).value("state").toString(), QStringLiteral("failed"));
  }

  // A failed run says so on stderr (docs/cli.md: diagnostics go to standard error), not
  // only in the training log on stdout.
  void failureIsReportedOnStderr() {
    QTemporaryDir tmp;
    const QString data = tmp.filePath("broken.jsonl");
    QFile f(data);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("not json\n");
    f.close();
    const Run r = odyssey_train({"run", lora_preset(tmp), "--set", "dataset=[" + data + "]"});
    qInfo("failed run: exit %d; stderr: %s", r.code, qPrintable(r.err.trimmed().right(400)));
    QCOMPARE(r.code, 1);
    const QString reason = status(run_dir(tmp.filePath("out"))).value("reason").toString();
    QVERIFY(!reason.isEmpty());
    QVERIFY2(r.err.contains("the run failed") && r.err.contains(reason.left(200)), qPrintable(r.err));
    QVERIFY2(r.err.contains("broken.jsonl"), qPrintable(r.err));
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
};

QTEST_GUILESS_MAIN(TstTrainRun)
#include "tst_train_run.moc"
