// The Chat page and its engine client with the real engine: `odyssey-train chat --json` on the
// bundled quickstart model, as a child process (docs/inference.md). EngineClient's signals
// (QSignalSpy): ready, streamed tokens that add up to the answer, an error event, the process
// dying. The page: side by side (both panes on the base with one seed: the same answer), Regenerate,
// the saved conversations a dataset the loader accepts, the engine killed mid-answer (the page
// says so, keeps its state and answers again after a restart). With ODYSSEY_SCREENSHOT_DIR set,
// the page is saved as chat-side-by-side.png (docs/screenshots).
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>

#include "chat/chat_page.h"
#include "chat/engine_client.h"
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

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    qputenv("ODYSSEY_TRAIN_BIN", kBin.toUtf8());
  }

  void engine_client() {
    EngineClient c;
    QSignalSpy ready(&c, &EngineClient::readyChanged), tokens(&c, &EngineClient::token), done(&c, &EngineClient::done),
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
    page.findChild<QSpinBox*>("chatMaxNewTokens")->setValue(8);
    const qsizetype before = answered.size();
    page.send(QStringLiteral("Hello again."));
    QTRY_VERIFY_WITH_TIMEOUT(answered.size() == before + 1, 120000);
    QVERIFY(page.transcript(0).contains("Hello again."));
  }

  void checkpoints_offered_as_adapters() {
    // <root>/<run>/checkpoints/checkpoint-N with adapter_config.json: listed, newest step first.
    QDir root(tmp_.filePath("runs"));
    for (const char* ck : {"r1/checkpoints/checkpoint-10", "r1/checkpoints/checkpoint-20", "r1/checkpoints/checkpoint-5"}) {
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
