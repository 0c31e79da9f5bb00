// The Chat page and its engine client with the real engine: `odyssey-train chat --json` on the
// bundled quickstart model, as a child process (docs/inference.md). EngineClient's signals
// (QSignalSpy): ready, streamed tokens that add up to the answer, an error event, the process
// dying. The page: side by side (both panes on the base with one seed: the same answer), Regenerate,
// the saved conversations a dataset the loader accepts, the engine killed mid-answer (the page
// says so, keeps its state and answers again after a restart). With ODYSSEY_SCREENSHOT_DIR set,
// the page is saved as chat-side-by-side.png (docs/screenshots). The Export and Evaluate pages
// on a real two-step LoRA run of the quickstart (odyssey-train run, CPU): the merged directory
// written with its size and offered to the Chat page, an export into an existing directory refused,
// a cancelled export leaving nothing behind; loss and perplexity of the base and each checkpoint
// (score --adapter), generated outputs beside the references.
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>

#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>

#include "chat/chat_page.h"
#include "chat/engine_client.h"
#include "chat/evaluate_page.h"
#include "chat/export_page.h"
#include "data/dataset.h"
#include "message_area.h"

using namespace odyssey;
using namespace odyssey::ui;

namespace {
const QString kModel = QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/quickstart/model");
const QString kBin = QStringLiteral(ODYSSEY_TRAIN_BIN);
}  // namespace

class TstChatPage : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

  // The checkpoints of the LoRA run, highest step first.
  QStringList list_ckpts() const {
    QStringList v;
    for (const QFileInfo& run : QDir(tmp_.filePath("out")).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot))
      for (const QFileInfo& c : QDir(run.absoluteFilePath() + "/checkpoints")
                                    .entryInfoList({"checkpoint-*"}, QDir::Dirs, QDir::Name | QDir::Reversed))
        v << c.absoluteFilePath();
    return v;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    qputenv("ODYSSEY_TRAIN_BIN", kBin.toUtf8());
  }

  void engine_client() {
    EngineClient c;
    QSignalSpy ready(&c, &EngineClient::ready_changed), tokens(&c, &EngineClient::token), done(&c, &EngineClient::done),
        failed(&c, &EngineClient::failed), exited(&c, &EngineClient::exited);
    c.start(kBin, kModel, {QStringLiteral("--device"), QStringLiteral("cpu")});
    QVERIFY(ready.wait(60000));
    QCOMPARE(c.info().value("template").toString(), QStringLiteral("jinja"));
    QVERIFY(c.send(QJsonObject{{"id", 1}, {"prompt", "Once upon a time"}, {"max_new_tokens", 8}, {"temperature", 0}}));
    QVERIFY(done.wait(60000));
    const QJsonObject r = done.front().at(1).toJsonObject();
    QCOMPARE(r.value("new_tokens").toInt(), r.value("ids").toArray().size());
    QString streamed;
    for (const auto& t : tokens) streamed += t.at(1).toString();
    QCOMPARE(streamed, r.value("text").toString());
    QVERIFY(c.send(QJsonObject{{"id", 2}, {"prompt", "x"}, {"top_p", 0}}));
    QVERIFY(failed.wait(60000));
    QCOMPARE(failed.front().at(0).toInt(), 2);
    QVERIFY(failed.front().at(1).toString().contains("top_p"));
    // Killed: exited(expected = false) with what is known.
    ::kill(static_cast<pid_t>(c.process_id()), SIGKILL);
    QVERIFY(exited.wait(30000));
    QCOMPARE(exited.front().at(0).toBool(), false);
    QVERIFY(exited.front().at(1).toString().contains("unexpectedly"));
    QVERIFY(!c.running());
    // Asked to stop: exited(expected = true).
    c.start(kBin, kModel, {QStringLiteral("--device"), QStringLiteral("cpu")});
    QVERIFY(ready.wait(60000));
    exited.clear();
    c.stop();
    QVERIFY(exited.wait(30000));
    QCOMPARE(exited.front().at(0).toBool(), true);
  }

  void side_by_side_save_and_restart() {
    ChatPage page;
    page.resize(1200, 700);
    page.set_runs_root(tmp_.path());
    page.set_model(kModel);
    // Sampling with one seed: both panes (the base model each) answer alike.
    page.findChild<QDoubleSpinBox*>("chatTemperature")->setValue(1.0);
    page.findChild<QSpinBox*>("chatSeed")->setValue(11);
    page.findChild<QSpinBox*>("chatMaxNewTokens")->setValue(24);
    page.set_compare(true);
    page.show();
    QSignalSpy answered(&page, &ChatPage::answered);
    page.send(QStringLiteral("Tell me about long-context fine-tuning."));
    QTRY_VERIFY_WITH_TIMEOUT(answered.size() == 2, 120000);
    QVERIFY(!page.busy());
    QCOMPARE(answered.at(0).at(0).toInt(), 0);
    QCOMPARE(answered.at(1).at(0).toInt(), 1);
    QVERIFY(page.transcript(0).contains("Tell me about long-context fine-tuning."));
    QCOMPARE(page.transcript(0), page.transcript(1));
    page.regenerate();
    QTRY_VERIFY_WITH_TIMEOUT(answered.size() == 4, 120000);
    if (!qEnvironmentVariableIsEmpty("ODYSSEY_SCREENSHOT_DIR"))
      QVERIFY(page.grab().save(qEnvironmentVariable("ODYSSEY_SCREENSHOT_DIR") + "/chat-side-by-side.png"));

    // Saved: one {"messages": [...]} line per pane, a dataset the loader takes as it is.
    const QString file = tmp_.filePath("chat.jsonl");
    QString error;
    QVERIFY2(page.save_conversations(file, &error), qPrintable(error));
    auto ds = data::read_dataset_file(file.toStdString());
    QVERIFY2(ds.ok(), format_all(ds.diagnostics).c_str());
    QCOMPARE(ds.value.samples.size(), std::size_t{2});
    QCOMPARE(ds.value.samples[0].messages.size(), std::size_t{2});  // the regenerated answer replaced the first
    QCOMPARE(ds.value.report.format, std::string("messages"));

    // The engine dies mid-answer: the page says so; the next message restarts it.
    QSignalSpy lost(&page, &ChatPage::engine_lost);
    page.findChild<QSpinBox*>("chatMaxNewTokens")->setValue(2000);
    page.findChild<QDoubleSpinBox*>("chatTemperature")->setValue(1.0);
    page.set_compare(false);
    QSignalSpy tokens(page.engine(), &EngineClient::token);
    page.send(QStringLiteral("Keep talking."));
    QVERIFY(tokens.wait(60000));
    ::kill(static_cast<pid_t>(page.engine()->process_id()), SIGKILL);
    QVERIFY(lost.wait(30000));
    QTRY_VERIFY(!page.busy());
    auto* banner = page.findChild<MessageArea*>("chatBanner");
    QVERIFY(banner->isVisible());
    QVERIFY(banner->text().contains("restart"));
    if (!qEnvironmentVariableIsEmpty("ODYSSEY_SCREENSHOT_DIR"))
      QVERIFY(page.grab().save(qEnvironmentVariable("ODYSSEY_SCREENSHOT_DIR") + "/chat-engine-lost.png"));
    page.findChild<QSpinBox*>("chatMaxNewTokens")->setValue(8);
    const qsizetype before = answered.size();
    page.send(QStringLiteral("Hello again."));
    QTRY_VERIFY_WITH_TIMEOUT(answered.size() == before + 1, 120000);
    QVERIFY(page.transcript(0).contains("Hello again."));
  }

  // A two-step LoRA run of the quickstart with a checkpoint at each step.
  void lora_run() {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(kBin,
            {"run", "--set", "output_dir=" + tmp_.filePath("out"), "--set", "tuner_type=lora", "--set", "max_steps=2",
             "--set", "save_steps=1", "--set", "eval_steps=0", "--set", "learning_rate=0.05", "--name", "lora2"});
    QVERIFY(p.waitForFinished(300000));
    QVERIFY2(p.exitCode() == 0, p.readAll().right(3000).constData());
    QCOMPARE(list_ckpts().size(), 2);
  }

  void export_page() {
    ExportPage page;
    page.resize(900, 420);
    page.set_runs_root(tmp_.filePath("out"));
    page.show();
    const QString ck = list_ckpts().front();
    page.set_checkpoint(ck);
    const QString out = tmp_.filePath("merged");
    page.set_output(out);
    QSignalSpy finished(&page, &ExportPage::finished), open(&page, &ExportPage::open_in_chat);
    page.start_export();
    QVERIFY(finished.wait(300000));
    QVERIFY2(finished.front().at(0).toBool(), qPrintable(page.error_text()));
    QVERIFY(QFileInfo::exists(out + "/config.json") && QFileInfo::exists(out + "/model.safetensors"));
    QVERIFY2(page.result_text().contains(out) && page.result_text().contains("files"), qPrintable(page.result_text()));
    auto* bar = page.findChild<QProgressBar*>("exportProgress");
    QCOMPARE(bar->value(), bar->maximum());
    if (!qEnvironmentVariableIsEmpty("ODYSSEY_SCREENSHOT_DIR"))
      QVERIFY(page.grab().save(qEnvironmentVariable("ODYSSEY_SCREENSHOT_DIR") + "/export.png"));
    page.findChild<QPushButton*>("exportOpenInChat")->click();
    QCOMPARE(open.size(), 1);
    QCOMPARE(open.front().at(0).toString(), out);
    // The same directory again: refused by the engine, said on the page, the first export intact.
    finished.clear();
    page.start_export();
    QVERIFY(finished.wait(300000));
    QVERIFY(!finished.front().at(0).toBool());
    QVERIFY2(page.error_text().contains("already exists"), qPrintable(page.error_text()));
    QVERIFY(QFileInfo::exists(out + "/model.safetensors"));
    // Cancelled at once: nothing written, no temporary directory left.
    finished.clear();
    page.set_output(tmp_.filePath("merged2"));
    page.start_export();
    page.cancel();
    QVERIFY(finished.size() == 1 || finished.wait(30000));
    QVERIFY(!finished.front().at(0).toBool());
    QVERIFY(!QFileInfo::exists(tmp_.filePath("merged2")));
    QCOMPARE(QDir(tmp_.path()).entryList({"merged2.tmp-*"}, QDir::Dirs).size(), 0);
  }

  void evaluate_page() {
    QFile texts(tmp_.filePath("held-out.jsonl"));
    QVERIFY(texts.open(QIODevice::WriteOnly));
    texts.write("{\"text\": \"What is 2 + 3? 5\"}\n{\"text\": \"Reverse the word cat: tac\"}\n");
    texts.close();
    QFile prompts(tmp_.filePath("prompts.jsonl"));
    QVERIFY(prompts.open(QIODevice::WriteOnly));
    prompts.write(
        "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 2 + 3?\"}, {\"role\": \"assistant\", \"content\": "
        "\"5\"}]}\n"
        "{\"prompt\": \"Reverse the word cat:\"}\n");
    prompts.close();
    EvaluatePage page;
    page.resize(1100, 760);
    page.set_runs_root(tmp_.filePath("out"));
    page.set_model(kModel);
    page.set_score_file(texts.fileName());
    page.show();
    QSignalSpy finished(&page, &EvaluatePage::finished);
    page.score_all();
    QVERIFY(finished.wait(300000));
    QVERIFY2(page.error_text().isEmpty(), qPrintable(page.error_text()));
    QTableWidget* t = page.score_table();
    QCOMPARE(t->rowCount(), 3);  // the base, checkpoint-1, checkpoint-2
    QCOMPARE(t->item(0, 1)->text(), QStringLiteral("–"));
    QCOMPARE(t->item(1, 1)->text(), QStringLiteral("1"));
    QCOMPARE(t->item(2, 1)->text(), QStringLiteral("2"));
    for (int r = 0; r < 3; ++r) {
      const double loss = t->item(r, 2)->text().toDouble(), ppl = t->item(r, 3)->text().toDouble();
      QVERIFY(loss > 0 && std::isfinite(loss));
      QVERIFY(std::abs(ppl - std::exp(loss)) <= 1e-3 * ppl + 1e-3);
    }
    // Step 1 ran at learning rate 0 (warmup from 0): checkpoint-2 is the first that differs from the base.
    QVERIFY(t->item(2, 2)->text() != t->item(0, 2)->text());
    // The run's validation file (alpaca records) through the run's config.yaml: checkpoint-2's
    // loss is the run's final eval loss (to the table's 4 decimals).
    double eval_loss = -1;
    {
      const QString run = QFileInfo(QFileInfo(list_ckpts().front()).absolutePath()).absolutePath();
      QFile events(run + "/events.jsonl");
      QVERIFY(events.open(QIODevice::ReadOnly));
      for (const QByteArray& line : events.readAll().split('\n')) {
        const QJsonObject e = QJsonDocument::fromJson(line).object();
        if (e.value("type").toString() == "eval" && e.value("step").toInt() == 2)
          eval_loss = e.value("loss").toDouble();
      }
    }
    QVERIFY(eval_loss > 0);
    finished.clear();
    page.set_score_file(QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/quickstart/data/val.jsonl"));
    page.score_all();
    QVERIFY(finished.wait(300000));
    QVERIFY2(page.error_text().isEmpty(), qPrintable(page.error_text()));
    QCOMPARE(t->rowCount(), 3);
    QVERIFY2(std::abs(t->item(2, 2)->text().toDouble() - eval_loss) <= 6e-5,
             qPrintable(t->item(2, 2)->text() + " vs " + QString::number(eval_loss, 'f', 6)));
    page.set_score_file(texts.fileName());
    finished.clear();
    page.set_prompts_file(prompts.fileName());
    page.findChild<QSpinBox*>("evaluateMaxNewTokens")->setValue(8);
    page.generate();
    QVERIFY(finished.wait(300000));
    QVERIFY2(page.error_text().isEmpty(), qPrintable(page.error_text()));
    QTableWidget* g = page.generate_table();
    QCOMPARE(g->rowCount(), 2);
    QCOMPARE(g->item(0, 0)->text(), QStringLiteral("What is 2 + 3?"));
    QCOMPARE(g->item(0, 1)->text(), QStringLiteral("5"));
    QCOMPARE(g->item(1, 0)->text(), QStringLiteral("Reverse the word cat:"));
    if (!qEnvironmentVariableIsEmpty("ODYSSEY_SCREENSHOT_DIR"))
      QVERIFY(page.grab().save(qEnvironmentVariable("ODYSSEY_SCREENSHOT_DIR") + "/evaluate.png"));
    // A file that is not there: the engine's message on the page.
    finished.clear();
    page.set_score_file(tmp_.filePath("missing.jsonl"));
    page.score_all();
    QVERIFY(finished.wait(300000));
    QVERIFY2(page.error_text().contains("missing.jsonl"), qPrintable(page.error_text()));
    if (!qEnvironmentVariableIsEmpty("ODYSSEY_SCREENSHOT_DIR"))
      QVERIFY(page.grab().save(qEnvironmentVariable("ODYSSEY_SCREENSHOT_DIR") + "/evaluate-error.png"));
  }

  void checkpoints_offered_as_adapters() {
    // <root>/<run>/checkpoints/checkpoint-N with adapter_config.json: listed, newest step first.
    QDir root(tmp_.filePath("runs"));
    for (const char* ck :
         {"r1/checkpoints/checkpoint-10", "r1/checkpoints/checkpoint-20", "r1/checkpoints/checkpoint-5"}) {
      QVERIFY(root.mkpath(ck));
      QFile f(root.filePath(QString::fromLatin1(ck) + "/adapter_config.json"));
      QVERIFY(f.open(QIODevice::WriteOnly));
    }
    QVERIFY(root.mkpath("r1/checkpoints/checkpoint-30"));  // full fine-tune: no adapter
    ChatPage page;
    page.set_runs_root(root.absolutePath());
    auto* box = page.findChild<QComboBox*>("chatAdapterLeft");
    QStringList labels;
    for (int i = 0; i < box->count(); ++i) labels << box->itemText(i);
    QCOMPARE(labels.size(), 5);
    QCOMPARE(labels.at(1), QStringLiteral("r1 / checkpoint-20"));
    QCOMPARE(labels.at(3), QStringLiteral("r1 / checkpoint-5"));
    page.set_adapter(1, root.filePath("r1/checkpoints/checkpoint-10"));
    QCOMPARE(page.adapter(1), root.filePath("r1/checkpoints/checkpoint-10"));
    QCOMPARE(page.adapter(0), QString());
  }
};

QTEST_MAIN(TstChatPage)
#include "tst_chat_page.moc"
