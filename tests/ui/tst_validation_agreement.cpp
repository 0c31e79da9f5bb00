// The window's verdict equals the engine's: over broken presets, models, tokenizers, templates
// and datasets, `odyssey-train validate --check-files PRESET` (a real process) and the window's
// ConfigForm (what enables Start) must both accept or both refuse, and each case's verdict is
// the one a user expects (so a check that accepts everything, or refuses everything, fails).
// The table it prints is the one in docs/gui.md.
#include <QDir>
#include <QFile>
#include <QMap>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <sys/stat.h>

#include <functional>

#include "config_form.h"

using namespace odyssey;
using namespace odyssey::ui;

namespace {

const QString kModel = QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/quickstart/model");
const QString kTrain = QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/quickstart/data/train.jsonl");
const QString kVal = QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/quickstart/data/val.jsonl");

QString quoted(const QString& s) { return QLatin1Char('"') + s + QLatin1Char('"'); }

QString list(const QStringList& l) {
  QStringList q;
  for (const auto& s : l) q << quoted(s);
  return QLatin1Char('[') + q.join(QStringLiteral(", ")) + QLatin1Char(']');
}

void write(const QString& path, const QByteArray& text) {
  QFile f(path);
  QVERIFY2(f.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(path));
  f.write(text);
}

QByteArray read(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

QByteArray record(const char* user, const char* assistant) {
  return QByteArray(R"({"messages": [{"role": "user", "content": ")") + user +
         R"("}, {"role": "assistant", "content": ")" + assistant + "\"}]}\n";
}

// `good` valid records, then `bad` lines that are not JSON.
QByteArray records(int good, int bad) {
  QByteArray out;
  for (int i = 0; i < good; ++i) out += record("2+2?", "4");
  for (int i = 0; i < bad; ++i) out += "{broken " + QByteArray::number(i) + "\n";
  return out;
}

// One case: a folder of its own, a preset built from `keys`, and what a user expects.
struct Fixture {
  QString dir;
  QMap<QString, QString> keys;  // key -> YAML value
  QByteArray raw;               // when set, the whole preset text instead of `keys`
  QString path(const QString& name) const { return dir + QLatin1Char('/') + name; }
  // A copy of the quickstart model in this case's folder, to break.
  QString model_copy() {
    const QString m = path(QStringLiteral("model"));
    QDir().mkpath(m);
    for (const QString& f : QDir(kModel).entryList(QDir::Files))
      QFile::copy(kModel + QLatin1Char('/') + f, m + QLatin1Char('/') + f);
    keys[QStringLiteral("model")] = quoted(m);
    return m;
  }
  QString dataset(const QByteArray& text, const QString& name = QStringLiteral("train.jsonl")) {
    write(path(name), text);
    keys[QStringLiteral("dataset")] = list({path(name)});
    return path(name);
  }
};

struct Case {
  const char* name;
  bool accept;  // what a user expects the engine to say
  std::function<void(Fixture&)> setup;
};

std::vector<Case> cases() {
  using F = Fixture;
  const QString m = QStringLiteral("model"), ds = QStringLiteral("dataset"), val = QStringLiteral("val_dataset");
  return {
      {"the quickstart as it is", true, [](F&) {}},
      {"model: no such directory", false,
       [m](F& f) { f.keys[m] = quoted(f.path(QStringLiteral("nonexistent/Qwen2.5-7B"))); }},
      {"model: an empty directory", false,
       [m](F& f) {
         QDir().mkpath(f.path(QStringLiteral("empty")));
         f.keys[m] = quoted(f.path(QStringLiteral("empty")));
       }},
      {"model: an unknown hub id", false, [m](F& f) { f.keys[m] = QStringLiteral("nobody-here/NoSuchModel-7B"); }},
      {"model: config.json only (no weights)", false,
       [](F& f) {
         const QString d = f.model_copy();
         QFile::remove(d + QStringLiteral("/model.safetensors"));
       }},
      {"model: no tokenizer.json", false,
       [](F& f) { QFile::remove(f.model_copy() + QStringLiteral("/tokenizer.json")); }},
      {"model: config.json not JSON", false,
       [](F& f) { write(f.model_copy() + QStringLiteral("/config.json"), "{\"hidden_size\": 64,"); }},
      {"model: an architecture Odyssey cannot train", false,
       [](F& f) {
         const QString c = f.model_copy() + QStringLiteral("/config.json");
         write(c, read(c).replace("Qwen2ForCausalLM", "FooForCausalLM").replace("\"qwen2\"", "\"foo\""));
       }},
      {"model: weights truncated", false,
       [](F& f) {
         QFile w(f.model_copy() + QStringLiteral("/model.safetensors"));
         QVERIFY(w.resize(w.size() / 2));
       }},
      {"model: weights of another shape", false,
       [](F& f) {
         const QString c = f.model_copy() + QStringLiteral("/config.json");
         write(c, read(c).replace("\"intermediate_size\": 352", "\"intermediate_size\": 384"));
       }},
      {"model: tokenizer.json not JSON", false,
       [](F& f) { write(f.model_copy() + QStringLiteral("/tokenizer.json"), "{\"model\": "); }},
      {"model: vocab_size below the tokenizer's ids", false,
       [](F& f) {
         const QString c = f.model_copy() + QStringLiteral("/config.json");
         write(c, read(c).replace("\"vocab_size\": 1024", "\"vocab_size\": 512"));
       }},
      {"model: revision given with a directory", false,
       [](F& f) { f.keys[QStringLiteral("model_revision")] = QStringLiteral("main"); }},
      {"dataset: no such file", false, [ds](F& f) { f.keys[ds] = list({f.path(QStringLiteral("missing.jsonl"))}); }},
      {"dataset: a directory", false,
       [ds](F& f) {
         QDir().mkpath(f.path(QStringLiteral("folder.jsonl")));
         f.keys[ds] = list({f.path(QStringLiteral("folder.jsonl"))});
       }},
      {"dataset: a FIFO", false,
       [ds](F& f) {
         QVERIFY(::mkfifo(f.path(QStringLiteral("pipe.jsonl")).toLocal8Bit().constData(), 0600) == 0);
         f.keys[ds] = list({f.path(QStringLiteral("pipe.jsonl"))});
       }},
      {"dataset: an empty file", false, [](F& f) { f.dataset(""); }},
      {"dataset: blank lines only", false, [](F& f) { f.dataset("\n\n  \n"); }},
      {"dataset: 51 of 53 lines broken", false, [](F& f) { f.dataset(records(2, 51)); }},
      {"dataset: every line broken", false, [](F& f) { f.dataset(records(0, 5)); }},
      {"dataset: 1 of 200 broken (within 0.01)", true, [](F& f) { f.dataset(records(199, 1)); }},
      {"dataset: 1 of 200 broken, max_bad_sample_ratio 0.001", false,
       [](F& f) {
         f.dataset(records(199, 1));
         f.keys[QStringLiteral("max_bad_sample_ratio")] = QStringLiteral("0.001");
       }},
      {"dataset: 1 of 3 broken, max_bad_sample_ratio 0.5", true,
       [](F& f) {
         f.dataset(records(2, 1));
         f.keys[QStringLiteral("max_bad_sample_ratio")] = QStringLiteral("0.5");
       }},
      {"dataset: an unknown record format", false,
       [](F& f) { f.dataset("{\"question\": \"a\", \"reply\": \"b\"}\n{\"question\": \"c\", \"reply\": \"d\"}\n"); }},
      {"dataset: JSON array cut short", false,
       [](F& f) { f.dataset("[" + record("a", "b") + ",", QStringLiteral("train.json")); }},
      {"dataset: a .txt file", false, [](F& f) { f.dataset(records(3, 0), QStringLiteral("train.txt")); }},
      {"dataset: #N upsampling too far", false,
       [ds](F& f) { f.keys[ds] = list({f.dataset(records(2, 0)) + QStringLiteral("#100000")}); }},
      {"dataset: none at all", false, [ds](F& f) { f.keys[ds] = QStringLiteral("[]"); }},
      {"dataset: alpaca records", true,
       [](F& f) { f.dataset("{\"instruction\": \"2+2?\", \"input\": \"\", \"output\": \"4\"}\n"); }},
      {"val_dataset: no such file", false, [val](F& f) { f.keys[val] = list({f.path(QStringLiteral("nope.jsonl"))}); }},
      {"val_dataset: every line broken", false,
       [val](F& f) {
         write(f.path(QStringLiteral("val.jsonl")), records(0, 4));
         f.keys[val] = list({f.path(QStringLiteral("val.jsonl"))});
       }},
      {"template_file: no such file", false,
       [](F& f) {
         f.keys[QStringLiteral("template")] = QStringLiteral("auto");
         f.keys[QStringLiteral("template_file")] = quoted(f.path(QStringLiteral("none.jinja")));
       }},
      {"template_file: broken Jinja", false,
       [](F& f) {
         write(f.path(QStringLiteral("t.jinja")), "{% for m in messages %}{{ m.content }");
         f.keys[QStringLiteral("template")] = QStringLiteral("auto");
         f.keys[QStringLiteral("template_file")] = quoted(f.path(QStringLiteral("t.jinja")));
       }},
      {"template_file: a working template", true,
       [](F& f) {
         write(f.path(QStringLiteral("t.jinja")),
               "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}"
               "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\n"
               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
         f.keys[QStringLiteral("template")] = QStringLiteral("auto");
         f.keys[QStringLiteral("template_file")] = quoted(f.path(QStringLiteral("t.jinja")));
       }},
      {"template_file with template: chatml", false,
       [](F& f) {
         write(f.path(QStringLiteral("t.jinja")), "{{ messages[0].content }}");
         f.keys[QStringLiteral("template_file")] = quoted(f.path(QStringLiteral("t.jinja")));
       }},
      {"template: an unknown name", false, [](F& f) { f.keys[QStringLiteral("template")] = QStringLiteral("llama9"); }},
      {"learning_rate: negative", false, [](F& f) { f.keys[QStringLiteral("learning_rate")] = QStringLiteral("-1"); }},
      {"lora_rank with a full fine-tune", false,
       [](F& f) { f.keys[QStringLiteral("lora_rank")] = QStringLiteral("16"); }},
      {"sequence_parallel_size 3: ring without packing", false,
       [](F& f) {
         f.keys[QStringLiteral("sequence_parallel_size")] = QStringLiteral("3");
         f.keys[QStringLiteral("nproc_per_node")] = QStringLiteral("3");
       }},
      {"Ulysses 4 over 2 KV heads, packed", true,
       [](F& f) {
         f.keys[QStringLiteral("sequence_parallel_size")] = QStringLiteral("4");
         f.keys[QStringLiteral("nproc_per_node")] = QStringLiteral("4");
         f.keys[QStringLiteral("packing")] = QStringLiteral("true");
       }},
      {"preset: an unknown key", false, [](F& f) { f.keys[QStringLiteral("learning_rat")] = QStringLiteral("0.1"); }},
      {"preset: not YAML", false, [](F& f) { f.raw = "model: [unclosed\ndataset: {"; }},
      {"dataset: a path under ~", true,
       [ds](F& f) {
         write(QDir::homePath() + QStringLiteral("/agreement-home.jsonl"), records(3, 0));
         f.keys[ds] = QStringLiteral("[\"~/agreement-home.jsonl\"]");
       }},
  };
}

}  // namespace

class TstValidationAgreement : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString bin_;

 private slots:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    // The "~" case writes into HOME: a folder of this test's own.
    QDir().mkpath(tmp_.filePath(QStringLiteral("home")));
    qputenv("HOME", tmp_.filePath(QStringLiteral("home")).toLocal8Bit());
    // No hub cache of the developer's: an unknown id is unknown.
    qputenv("HF_HOME", tmp_.filePath(QStringLiteral("hf")).toLocal8Bit());
    qputenv("MODELSCOPE_CACHE", tmp_.filePath(QStringLiteral("ms")).toLocal8Bit());
    bin_ = qEnvironmentVariable("ODYSSEY_TRAIN_BIN");
#ifdef ODYSSEY_TRAIN_BIN
    if (bin_.isEmpty()) bin_ = QStringLiteral(ODYSSEY_TRAIN_BIN);
#endif
  }

  void the_window_agrees_with_the_engine() {
    if (bin_.isEmpty()) QSKIP("no odyssey-train (set ODYSSEY_TRAIN_BIN)");
    const auto all = cases();
    QVERIFY(all.size() >= 30);
    QStringList table{QStringLiteral("| case | expected | engine | window | engine's first error |"),
                      QStringLiteral("|---|---|---|---|---|")};
    int i = 0, disagreements = 0, surprises = 0;
    for (const Case& c : all) {
      Fixture f;
      f.dir = tmp_.filePath(QStringLiteral("case%1").arg(i++));
      QVERIFY(QDir().mkpath(f.dir));
      f.keys = {{QStringLiteral("model"), quoted(kModel)},
                {QStringLiteral("template"), QStringLiteral("chatml")},
                {QStringLiteral("torch_dtype"), QStringLiteral("float32")},
                {QStringLiteral("dataset"), list({kTrain})},
                {QStringLiteral("val_dataset"), list({kVal})},
                {QStringLiteral("max_length"), QStringLiteral("256")},
                {QStringLiteral("tuner_type"), QStringLiteral("full")},
                {QStringLiteral("device"), QStringLiteral("cpu")},
                {QStringLiteral("output_dir"), quoted(f.path(QStringLiteral("out")))}};
      c.setup(f);
      if (QTest::currentTestFailed()) return;
      QByteArray text = f.raw;
      if (text.isEmpty())
        for (auto it = f.keys.cbegin(); it != f.keys.cend(); ++it)
          text += (it.key() + QStringLiteral(": ") + it.value() + QLatin1Char('\n')).toUtf8();
      const QString preset = f.path(QStringLiteral("preset.yaml"));
      write(preset, text);

      QProcess p;
      p.start(bin_, {QStringLiteral("validate"), QStringLiteral("--check-files"), preset});
      QVERIFY(p.waitForFinished(60000));
      const bool engine = p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
      QString first_error;
      for (const QString& line : QString::fromUtf8(p.readAllStandardError()).split(QLatin1Char('\n')))
        if (line.contains(QStringLiteral("error: "))) {
          first_error = line.mid(line.indexOf(QStringLiteral("error: ")) + 7).left(110);
          break;
        }

      ConfigForm form;
      bool window = false;
      if (!has_errors(form.load_file(preset))) {
        QTRY_VERIFY_WITH_TIMEOUT(!form.files_pending(), 60000);
        window = form.ready_to_start();
      }
      auto word = [](bool ok) { return ok ? QStringLiteral("accept") : QStringLiteral("refuse"); };
      table << QStringLiteral("| %1 | %2 | %3 | %4 | %5 |")
                   .arg(QString::fromLatin1(c.name), word(c.accept), word(engine), word(window),
                        first_error.replace(tmp_.path(), QStringLiteral("…"))
                            .replace(QLatin1Char('|'), QLatin1Char('/')));
      if (engine != window) {
        ++disagreements;
        qWarning("%s: engine %s, window %s; engine said: %s; window: %s", c.name, qPrintable(word(engine)),
                 qPrintable(word(window)), qPrintable(first_error), format_all(form.diagnostics()).c_str());
      }
      if (engine != c.accept) {
        ++surprises;
        qWarning("%s: expected %s, the engine said %s: %s", c.name, qPrintable(word(c.accept)),
                 qPrintable(word(engine)), qPrintable(first_error));
      }
    }
    qInfo().noquote() << "\n" << table.join(QLatin1Char('\n'));
    QCOMPARE(disagreements, 0);
    QCOMPARE(surprises, 0);
  }
};

QTEST_GUILESS_MAIN(TstValidationAgreement)
#include "tst_validation_agreement.moc"
