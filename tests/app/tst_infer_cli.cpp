// `odyssey-train generate` and `odyssey-train chat --json` as real processes on the bundled
// quickstart model (its own chat template and generation_config.json): the outputs equal
// transformers' generate() through tokenizer(text) and apply_chat_template (tests/reference/
// generate_oracle.py --prompts), and the line protocol survives hostile input — malformed JSON,
// a line over the size limit, unknown fields, wrong types, invalid UTF-8, deep nesting, seeded
// random mutations of valid requests, a cancel, SIGINT and a closed input — answering every
// request line with exactly one done or error event and exiting 0.
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>

namespace {

QString src(const char* rel) { return QStringLiteral(ODYSSEY_SOURCE_DIR "/") + QString::fromLatin1(rel); }
const QString kModel = src("resources/quickstart/model");

// Reads p's stdout until it contains `needle` or `ms` milliseconds pass; returns what was read.
QByteArray read_until(QProcess& p, const char* needle, qint64 ms) {
  QByteArray out;
  QElapsedTimer t;
  t.start();
  while (!out.contains(needle) && t.elapsed() < ms) {
    p.waitForReadyRead(1000);
    out += p.readAllStandardOutput();
  }
  return out;
}

QList<QJsonObject> json_lines(const QByteArray& out) {
  QList<QJsonObject> v;
  for (const QByteArray& l : out.split('\n')) {
    if (l.trimmed().isEmpty()) continue;
    QJsonParseError e{};
    const QJsonDocument d = QJsonDocument::fromJson(l, &e);
    if (e.error != QJsonParseError::NoError || !d.isObject()) qFatal("not a JSON object line: %s", l.constData());
    v.push_back(d.object());
  }
  return v;
}

struct Ran {
  int code = -1;
  QByteArray out, err;
};

Ran run(const QStringList& args, const QByteArray& input = {}, int timeout_ms = 120000) {
  QProcess p;
  p.start(QStringLiteral(ODYSSEY_TRAIN_BIN), args);
  if (!p.waitForStarted()) qFatal("odyssey-train did not start");
  p.write(input);
  p.closeWriteChannel();
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, p.readAllStandardOutput(),
          p.readAllStandardError()};
}

}  // namespace

class TstInferCli : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

  QString write(const QString& name, const QByteArray& text) {
    QFile f(tmp_.filePath(name));
    if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write %s", qPrintable(name));
    f.write(text);
    return f.fileName();
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  // The CLI's greedy output equals transformers' generate() for raw prompts and conversations,
  // batched (different lengths: left padding) or one at a time.
  void generate_matches_transformers() {
    if (QStringLiteral(ODYSSEY_PYTHON).isEmpty()) QSKIP("ODYSSEY_PYTHON is empty: no transformers to compare with");
    const QString prompts = write(
        "prompts.jsonl",
        "{\"prompt\": \"The quick brown fox\"}\n"
        "\n"
        "{\"id\": \"m1\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
        "\"content\": \"hello there, na\xc3\xafve caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\"}]}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"ref "
        "answer\"}]}\n"
        "{\"prompt\": \"Once upon a time, in a land far away, there lived a\"}\n");
    QProcess py;
    py.setProcessChannelMode(QProcess::MergedChannels);
    py.start(QStringLiteral(ODYSSEY_PYTHON), {src("tests/reference/generate_oracle.py"), "--prompts", kModel, prompts,
                                              tmp_.filePath("oracle.jsonl"), "--new-tokens", "24"});
    QVERIFY(py.waitForFinished(300000));
    QVERIFY2(py.exitCode() == 0, py.readAll().constData());
    QFile of(tmp_.filePath("oracle.jsonl"));
    QVERIFY(of.open(QIODevice::ReadOnly));
    const QList<QJsonObject> want = json_lines(of.readAll());
    QCOMPARE(want.size(), 4);
    for (const char* batch : {"1", "3"}) {
      const QString out = tmp_.filePath(QStringLiteral("out%1.jsonl").arg(QLatin1String(batch)));
      const Ran r = run({"generate", "--model", kModel, "--prompts", prompts, "--out", out, "--max-new-tokens", "24",
                         "--batch-size", batch, "--device", "cpu"});
      QVERIFY2(r.code == 0, r.err.constData());
      QVERIFY2(r.err.contains("4 prompts"), r.err.constData());
      QFile f(out);
      QVERIFY(f.open(QIODevice::ReadOnly));
      const QList<QJsonObject> got = json_lines(f.readAll());
      QCOMPARE(got.size(), 4);
      for (int i = 0; i < 4; ++i) {
        QCOMPARE(got[i]["index"].toInt(), i);
        QCOMPARE(got[i]["ids"].toArray(), want[i]["ids"].toArray());
        QCOMPARE(got[i]["text"].toString(), want[i]["text"].toString());
        QCOMPARE(got[i]["new_tokens"].toInt(), static_cast<int>(got[i]["ids"].toArray().size()));
        QVERIFY(got[i]["finish_reason"] == "stop" || got[i]["finish_reason"] == "length");
        QVERIFY(got[i]["tokens_per_s"].toDouble() > 0);
      }
      QCOMPARE(got[1]["id"].toString(), QStringLiteral("m1"));
      QCOMPARE(got[2]["reference"].toString(), QStringLiteral("ref answer"));
    }
  }

  // --quant nf4: the base quantized on load equals transformers + bitsandbytes load_in_4bit.
  void generate_4bit_matches_bitsandbytes() {
    if (QStringLiteral(ODYSSEY_PYTHON).isEmpty()) QSKIP("ODYSSEY_PYTHON is empty: no transformers to compare with");
    const QString prompts = write("prompts4.jsonl",
                                  "{\"prompt\": \"The quick brown fox\"}\n"
                                  "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 2 + 3?\"}]}\n");
    QProcess py;
    py.setProcessChannelMode(QProcess::MergedChannels);
    py.start(QStringLiteral(ODYSSEY_PYTHON),
             {src("tests/reference/generate_oracle.py"), "--prompts", kModel, prompts, tmp_.filePath("oracle4.jsonl"),
              "--new-tokens", "16", "--load-in-4bit", "nf4"});
    QVERIFY(py.waitForFinished(300000));
    QVERIFY2(py.exitCode() == 0, py.readAll().right(3000).constData());
    QFile of(tmp_.filePath("oracle4.jsonl"));
    QVERIFY(of.open(QIODevice::ReadOnly));
    const QList<QJsonObject> want = json_lines(of.readAll());
    const Ran r = run({"generate", "--model", kModel, "--prompts", prompts, "--max-new-tokens", "16", "--quant", "nf4",
                       "--device", "cpu"});
    QVERIFY2(r.code == 0, r.err.constData());
    const QList<QJsonObject> got = json_lines(r.out);
    QCOMPARE(got.size(), want.size());
    for (int i = 0; i < got.size(); ++i) QCOMPARE(got[i]["ids"].toArray(), want[i]["ids"].toArray());
    const Ran bad = run({"generate", "--model", kModel, "--prompts", prompts, "--quant", "int3"});
    QCOMPARE(bad.code, 1);
    QVERIFY2(bad.err.contains("quant: found 'int3', expected nf4 or fp4"), bad.err.constData());
  }

  // Bad prompt files: every bad line named before the model loads; an empty file; flags.
  void generate_bad_input() {
    const QString bad = write("bad.jsonl", "{\"prompt\": 3}\nnot json\n{\"messages\": []}\n{}\n{\"prompt\": \"ok\"}\n");
    Ran r = run({"generate", "--model", kModel, "--prompts", bad});
    QCOMPARE(r.code, 1);
    for (const char* want : {"bad.jsonl:1: error: prompt: expected a string", "bad.jsonl:2: error: not valid JSON",
                             "bad.jsonl:3: error: messages: is empty", "bad.jsonl:4: error: expected \"prompt\""})
      QVERIFY2(r.err.contains(want), r.err.constData());
    QVERIFY(r.out.isEmpty());
    r = run({"generate", "--model", kModel, "--prompts", write("empty.jsonl", "\n\n")});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("no prompts"), r.err.constData());
    const QString ok = write("ok.jsonl", "{\"prompt\": \"hi\"}\n");
    r = run({"generate", "--model", kModel, "--prompts", ok, "--temperature", "-1"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--temperature: expected a number >= 0"), r.err.constData());
    r = run({"generate", "--model", kModel, "--prompts", ok, "--top-p", "abc"});
    QCOMPARE(r.code, 2);
    r = run({"generate", "--model", tmp_.filePath("nonexistent"), "--prompts", ok});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("nonexistent"), r.err.constData());
    // A prompt longer than the model's 2,048 positions.
    QByteArray longp = "{\"prompt\": \"";
    for (int i = 0; i < 2100; ++i) longp += "x y ";
    r = run({"generate", "--model", kModel, "--prompts", write("long.jsonl", longp + "\"}\n")});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("long.jsonl:1: error: prompt:") && r.err.contains("2048 positions"), r.err.constData());
    // A stop string that never occurs runs to --max-new-tokens; seeded sampling repeats itself.
    const QStringList sample{"generate", "--model",       kModel,      "--prompts", ok,   "--max-new-tokens",
                             "16",       "--temperature", "0.9",       "--top-k",   "50", "--seed",
                             "3",        "--stop",        "never-ever"};
    const Ran a = run(sample), b = run(sample);
    QCOMPARE(a.code, 0);
    QCOMPARE(json_lines(a.out)[0]["ids"], json_lines(b.out)[0]["ids"]);
  }

  // The protocol answers each request line with one done or one error event, in order.
  void protocol_hostile_input() {
    QByteArray in;
    QList<QByteArray> expect;  // "done" or "error" per request line
    auto add = [&](const QByteArray& line, const char* event) {
      in += line + "\n";
      expect.push_back(event);
    };
    add("{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_new_tokens\": 4}", "done");
    add("garbage", "error");
    add("{\"id\": 2, \"prompt\": \"x\", \"temprature\": 1}", "error");
    add("{\"id\": 3, \"prompt\": 7}", "error");
    add("[1, 2, 3]", "error");
    add("{\"id\": 4, \"prompt\": \"x\", \"top_p\": 0}", "error");
    add("{\"id\": 5, \"prompt\": \"x\", \"stop\": [1]}", "error");
    add("{\"id\": 6, \"prompt\": \"x\", \"adapter\": \"/nonexistent/adapter\"}", "error");
    add("{\"id\": 7, \"prompt\": \"bad \xff\xfe utf-8\", \"max_new_tokens\": 2}", "error");
    add(QByteArray(200000, '[') + QByteArray(200000, ']'), "error");
    add("{\"id\": 8, \"prompt\": \"" + QByteArray(17 << 20, 'a') + "\"}", "error");  // over 16 MiB
    add("{\"type\": \"cancel\", \"id\": 99}", "error");                              // nothing running
    add("{\"id\": 9, \"prompt\": \"x\", \"max_new_tokens\": 3, \"adapter\": null}", "done");
    // Seeded random mutations of a valid request: whatever they become, one event each.
    QRandomGenerator rng(20261203);
    const QByteArray valid =
        "{\"id\": 10, \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}], \"max_new_tokens\": 2, "
        "\"temperature\": 0.5}";
    for (int i = 0; i < 60; ++i) {
      QByteArray m = valid;
      for (int k = 0; k < 1 + static_cast<int>(rng.bounded(4)); ++k)
        m[static_cast<int>(rng.bounded(static_cast<quint32>(m.size())))] = static_cast<char>(rng.bounded(1, 256));
      if (m.contains('\n') || m.contains('\r')) continue;
      in += m + "\n";
      expect.push_back("either");
    }
    const Ran r = run({"chat", "--model", kModel, "--json", "--device", "cpu"}, in, 300000);
    QVERIFY2(r.code == 0, (r.err + r.out.right(2000)).constData());
    const QList<QJsonObject> ev = json_lines(r.out);
    QVERIFY(!ev.isEmpty());
    QCOMPARE(ev.front()["event"].toString(), QStringLiteral("ready"));
    QCOMPARE(ev.front()["template"].toString(), QStringLiteral("jinja"));
    QList<QJsonObject> answers;
    for (const auto& e : ev)
      if (e["event"] == "done" || e["event"] == "error") answers.push_back(e);
    QCOMPARE(answers.size(), expect.size());
    for (int i = 0; i < expect.size(); ++i) {
      if (expect[i] == "either") continue;
      QVERIFY2(
          answers[i]["event"].toString().toLatin1() == expect[i],
          qPrintable(
              QStringLiteral("request %1: %2").arg(i + 1).arg(QString::fromUtf8(QJsonDocument(answers[i]).toJson()))));
    }
    QVERIFY(answers[2]["message"].toString().contains("did you mean 'temperature'"));
    QVERIFY(answers[10]["message"].toString().contains("16 MiB"));
    QCOMPARE(answers[10]["line"].toInt(), 11);
    QCOMPARE(answers[0]["id"].toInt(), 1);
    // Token events of request 1 add up to its text.
    QString streamed;
    for (const auto& e : ev)
      if (e["event"] == "token" && e["id"].toInt() == 1) streamed += e["text"].toString();
    QCOMPARE(streamed, answers[0]["text"].toString());
  }

  // A cancel stops the running generation; SIGINT stops it and ends the process with 0.
  void protocol_cancel_and_interrupt() {
    const QByteArray req = "{\"id\": \"long\", \"prompt\": \"x\", \"max_new_tokens\": 1500, \"ignore_eos\": true}\n";
    Ran r = run({"chat", "--model", kModel, "--json", "--device", "cpu"}, req + "{\"type\": \"cancel\"}\n");
    QCOMPARE(r.code, 0);
    QList<QJsonObject> ev = json_lines(r.out);
    QCOMPARE(ev.back()["event"].toString(), QStringLiteral("done"));
    QCOMPARE(ev.back()["finish_reason"].toString(), QStringLiteral("cancelled"));
    QVERIFY(ev.back()["new_tokens"].toInt() < 1500);

    QProcess p;
    p.start(QStringLiteral(ODYSSEY_TRAIN_BIN), {"chat", "--model", kModel, "--json", "--device", "cpu"});
    QVERIFY(p.waitForStarted());
    p.write(req);  // the input stays open
    QByteArray out = read_until(p, "\"event\":\"token\"", 60000);
    QVERIFY2(out.contains("\"event\":\"token\""), out.constData());
    ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(60000));
    out += p.readAllStandardOutput();
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 0);
    ev = json_lines(out);
    QCOMPARE(ev.back()["finish_reason"].toString(), QStringLiteral("cancelled"));

    // SIGINT while idle (waiting for a request, the input still open): the process ends, exit 0.
    QProcess idle;
    idle.start(QStringLiteral(ODYSSEY_TRAIN_BIN), {"chat", "--model", kModel, "--json", "--device", "cpu"});
    QVERIFY(idle.waitForStarted());
    const QByteArray seen = read_until(idle, "\"event\":\"ready\"", 60000);
    QVERIFY2(seen.contains("\"event\":\"ready\""), seen.constData());
    ::kill(static_cast<pid_t>(idle.processId()), SIGINT);
    QVERIFY(idle.waitForFinished(10000));
    QCOMPARE(idle.exitStatus(), QProcess::NormalExit);
    QCOMPARE(idle.exitCode(), 0);
  }

  // The terminal chat with its input piped: an answer per message, /system, /reset, /exit.
  void terminal_chat() {
    const Ran r = run({"chat", "--model", kModel, "--device", "cpu", "--max-new-tokens", "6", "--temperature", "0"},
                      "What is 2 + 3?\n/system Be brief.\nAnd 4 + 4?\n/reset\nHi\n/exit\nnever read\n");
    QVERIFY2(r.code == 0, (r.err + r.out).constData());
    QVERIFY2(r.err.contains("Chatting with") && r.err.contains("template jinja"), r.err.constData());
    QVERIFY2(r.err.contains("(system prompt set)") && r.err.contains("(conversation cleared)"), r.err.constData());
    QCOMPARE(r.out.count("\n> "), 6);  // a prompt before each line read, up to /exit
    // Without input left the program ends at the end of its input, exit 0.
    const Ran eof = run({"chat", "--model", kModel, "--device", "cpu", "--max-new-tokens", "2"}, "Hi\n");
    QCOMPARE(eof.code, 0);
  }

  // A model without a chat template: the terminal chat refuses to start; the protocol still
  // serves raw prompts and answers conversations with an error.
  void model_without_template() {
    const QString dir = tmp_.filePath("notemplate");
    QVERIFY(QDir().mkpath(dir));
    for (const QString& f : QDir(kModel).entryList(QDir::Files)) QVERIFY(QFile::copy(kModel + "/" + f, dir + "/" + f));
    QFile cfg(dir + "/tokenizer_config.json");
    QVERIFY(cfg.open(QIODevice::ReadOnly));
    QJsonObject c = QJsonDocument::fromJson(cfg.readAll()).object();
    cfg.close();
    c.remove("chat_template");
    QVERIFY(cfg.open(QIODevice::WriteOnly | QIODevice::Truncate));
    cfg.write(QJsonDocument(c).toJson());
    cfg.close();
    // The quickstart is a Qwen2 model: without a template of its own, the family's built-in one
    // needs <|im_start|>, which its tokenizer has; name one it lacks instead.
    Ran r = run({"chat", "--model", dir, "--template", "llama3"}, "hi\n");
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("no chat template"), r.err.constData());
    r = run(
        {"chat", "--model", dir, "--template", "llama3", "--json"},
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n{\"prompt\": \"hi\", \"max_new_tokens\": 2}\n");
    QCOMPARE(r.code, 0);
    const QList<QJsonObject> ev = json_lines(r.out);
    QVERIFY(ev.front()["template"].isNull());
    QCOMPARE(ev[1]["event"].toString(), QStringLiteral("error"));
    QVERIFY(ev[1]["message"].toString().contains("no chat template"));
    QCOMPARE(ev.back()["event"].toString(), QStringLiteral("done"));
  }
};

QTEST_GUILESS_MAIN(TstInferCli)
#include "tst_infer_cli.moc"
