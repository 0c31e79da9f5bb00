// The Train page's dataset preview: samples through the chat template with the trained
// tokens marked, the token-length histogram, the bound on what a large file costs, and the
// messages shown when there is no tokenizer. The quickstart model (a real Qwen2 tokenizer
// layout) and its dataset are the fixtures; the oracle for the marked spans is the dataset
// file itself (each answer is trained, the question is not).
#include <QElapsedTimer>
#include <QLabel>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextDocument>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config_form.h"
#include "dataset_model.h"
#include "dataset_preview.h"
#include "palette.h"
#include "token_preview.h"
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
#include <qcustomplot.h>
#endif

using namespace odyssey;
using namespace odyssey::ui;

namespace {

const std::string kModel = ODYSSEY_SOURCE_DIR "/resources/quickstart/model";
const std::string kTrain = ODYSSEY_SOURCE_DIR "/resources/quickstart/data/train.jsonl";

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TokenPreviewRequest request(const std::string& dataset) {
  TokenPreviewRequest r;
  r.dataset_path = dataset;
  r.model_dir = kModel;
  r.model_family = "qwen2";
  r.template_name = "chatml";
  r.max_length = 256;
  return r;
}

std::string joined(const PreviewSample& s, bool trained) {
  std::string t;
  for (const auto& seg : s.segments)
    if (seg.trained == trained) t += seg.text;
  return t;
}

// The text of the document's fragments drawn with `background`.
QString text_with_background(const QTextDocument* doc, const QColor& background) {
  QString out;
  for (QTextBlock b = doc->begin(); b.isValid(); b = b.next())
    for (auto it = b.begin(); !it.atEnd(); ++it)
      if (it.fragment().charFormat().background().color() == background &&
          it.fragment().charFormat().background().style() != Qt::NoBrush)
        out += it.fragment().text();
  return out;
}

}  // namespace

class TstDatasetPreview : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void answers_are_trained_and_questions_are_not() {
    const TokenPreview p = build_token_preview(request(kTrain));
    QVERIFY2(p.error.empty(), p.error.c_str());
    QCOMPARE(p.template_name, std::string("chatml"));
    QCOMPARE(p.samples.size(), kShownSamples);
    const auto lines = lines_of(kTrain);
    QCOMPARE(p.lengths.size(), lines.size());  // 2,000 samples: the whole file
    QVERIFY(!p.file_has_more);
    for (std::size_t i = 0; i < p.samples.size(); ++i) {
      const auto rec = nlohmann::json::parse(lines[i]);
      const std::string question = rec["messages"][1]["content"];
      const std::string answer = rec["messages"][2]["content"];
      const PreviewSample& s = p.samples[i];
      QCOMPARE(s.origin, kTrain + ":" + std::to_string(i + 1));
      const std::string trained = joined(s, true), context = joined(s, false);
      // Each answer and its end-of-turn token are trained, nothing of the question is.
      QVERIFY2(trained.find(answer + "<|im_end|>") != std::string::npos, trained.c_str());
      QVERIFY2(context.find(question) != std::string::npos, context.c_str());
      QVERIFY2(trained.find(question) == std::string::npos, trained.c_str());
      QVERIFY(context.find("<|im_start|>user") != std::string::npos);
      QCOMPARE(s.tokens, static_cast<std::int64_t>(p.lengths[i]));
      QVERIFY(s.trained_tokens > 0 && s.trained_tokens < s.tokens);
    }
  }

  void a_large_file_is_read_from_its_head_only() {
    // 30,000 records, a blank first line and a broken record: only the first 2,000 records
    // are parsed; line numbers and the file name stay the real file's.
    const auto lines = lines_of(kTrain);
    const std::string big = tmp_.filePath(QStringLiteral("big.jsonl")).toStdString();
    {
      std::ofstream out(big, std::ios::binary);
      out << "\n";
      for (int i = 0; i < 30000; ++i)
        out << (i == 3 ? std::string("{\"messages\": [broken") : lines[i % lines.size()]) << "\n";
    }
    QElapsedTimer t;
    t.start();
    const TokenPreview p = build_token_preview(request(big));
    QVERIFY2(p.error.empty(), p.error.c_str());
    QVERIFY(p.file_has_more);
    QCOMPARE(p.malformed, std::int64_t{1});
    QCOMPARE(p.records_read, static_cast<std::int64_t>(kMaxPreviewSamples - 1));
    QCOMPARE(p.lengths.size(), kMaxPreviewSamples - 1);
    QCOMPARE(p.samples[0].origin, big + ":2");
    QCOMPARE(p.samples[3].origin, big + ":6");  // line 5 is the broken record
    qInfo("preview of the first %zu records of 30,000: %lld ms", kMaxPreviewSamples,
          static_cast<long long>(t.elapsed()));
  }

  void a_json_array_file_is_previewed() {
    const auto lines = lines_of(kTrain);
    const std::string arr = tmp_.filePath(QStringLiteral("arr.json")).toStdString();
    std::ofstream(arr) << "[" << lines[0] << ",\n" << lines[1] << "]";
    const TokenPreview p = build_token_preview(request(arr));
    QVERIFY2(p.error.empty(), p.error.c_str());
    QCOMPARE(p.lengths.size(), std::size_t{2});
    QCOMPARE(p.samples[1].origin, arr + ":[1]");
  }

  void missing_pieces_are_explained() {
    TokenPreviewRequest r = request(kTrain);
    r.model_dir.clear();
    QVERIFY(build_token_preview(r).error.find("tokenizer.json") != std::string::npos);
    r.model_dir = tmp_.path().toStdString();  // a directory without tokenizer.json
    const std::string e = build_token_preview(r).error;
    QVERIFY2(e.find("has no tokenizer.json") != std::string::npos, e.c_str());
    r = request(tmp_.filePath(QStringLiteral("nope.jsonl")).toStdString());
    const std::string missing = build_token_preview(r).error;
    QVERIFY2(missing.find("nope.jsonl") != std::string::npos, missing.c_str());
    const std::string garbage = tmp_.filePath(QStringLiteral("garbage.jsonl")).toStdString();
    std::ofstream(garbage) << "not json\n{\"prompt\": 1}\n";
    const std::string bad = build_token_preview(request(garbage)).error;
    QVERIFY2(!bad.empty() && bad.find("garbage.jsonl") != std::string::npos, bad.c_str());
  }

  void histogram_bins_and_counts() {
    std::vector<std::int32_t> lengths;
    for (int i = 1; i <= 100; ++i) lengths.push_back(i * 10);  // 10 .. 1000
    const LengthHistogram h = length_histogram(lengths, 512, 40);
    QCOMPARE(h.longest, 1000);
    QCOMPARE(h.median, 500);
    QCOMPARE(h.p95, 950);
    QCOMPARE(h.over_max, std::int64_t{49});  // 520 .. 1000
    QCOMPARE(h.bin_width, 50.0);             // 1000 / 40 = 25 -> a round 50
    std::int64_t total = 0;
    for (auto c : h.counts) total += c;
    QCOMPARE(total, std::int64_t{100});
    QCOMPARE(h.counts[0], std::int64_t{4});   // 10, 20, 30, 40
    QCOMPARE(h.counts[20], std::int64_t{1});  // 1000
    // max_length beyond every sample widens the range; nothing is over it.
    const LengthHistogram wide = length_histogram({5, 6, 7}, 4096, 40);
    QCOMPARE(wide.over_max, std::int64_t{0});
    QVERIFY(static_cast<double>(wide.counts.size()) * wide.bin_width > 4096);
    QCOMPARE(length_histogram({}, 10).longest, 0);
  }

  void the_widget_shows_samples_histogram_and_max_length() {
    ConfigForm form;  // the embedded quickstart: its model and train.jsonl
    DatasetListModel datasets(&form);
    DatasetPreview preview(&form, &datasets, nullptr);
    QTRY_VERIFY_WITH_TIMEOUT(!preview.result().samples.empty(), 30000);
    QVERIFY(!preview.busy());
    QCOMPARE(QFileInfo(QString::fromStdString(preview.dataset_path())).fileName(), QStringLiteral("train.jsonl"));
    const QString body = preview.text()->toPlainText();
    QVERIFY2(body.contains(QStringLiteral("How many letters are in tiger?")), qPrintable(body));
    QVERIFY2(body.startsWith(QStringLiteral("train.jsonl:1 · %1 tokens, ").arg(preview.result().lengths[0])),
             qPrintable(body));
    // The trained tokens are the highlighted ones: the first answer ("5") and its end of turn.
    const QString marked = text_with_background(preview.text()->document(), trained_color(preview.palette()));
    QVERIFY2(marked.contains(QStringLiteral("5<|im_end|>")), qPrintable(marked));
    QVERIFY(!marked.contains(QStringLiteral("tiger")));
    QVERIFY2(preview.stats()->text().contains(QStringLiteral("every sample of the file")),
             qPrintable(preview.stats()->text()));
    QCOMPARE(preview.histogram().over_max, std::int64_t{0});
    QVERIFY(preview.stats()->text().contains(QStringLiteral("0 longer than max_length 256")));
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
    QCOMPARE(preview.plot()->plottableCount(), 1);
    QCOMPARE(preview.plot()->itemCount(), 2);  // the max_length line and its label
    auto* line = qobject_cast<QCPItemStraightLine*>(preview.plot()->item(0));
    QVERIFY(line);
    QCOMPARE(line->point1->coords().x(), 256.0);
#endif
    // A max_length shorter than some samples: counted, and what delete does with them said.
    const std::int32_t median = preview.histogram().median;
    QVERIFY(form.set_text("max_length", std::to_string(median)).empty());
    QTRY_COMPARE(preview.histogram().over_max, static_cast<std::int64_t>(std::count_if(
                                                   preview.result().lengths.begin(), preview.result().lengths.end(),
                                                   [median](std::int32_t l) { return l > median; })));
    QVERIFY(preview.histogram().over_max > 0);
    QVERIFY2(preview.stats()->text().contains(QStringLiteral("dropped from training")),
             qPrintable(preview.stats()->text()));
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
    QCOMPARE(qobject_cast<QCPItemStraightLine*>(preview.plot()->item(0))->point1->coords().x(),
             static_cast<double>(median));
#endif
  }

  void without_a_tokenizer_it_says_so_inline() {
    ConfigForm form;
    DatasetListModel datasets(&form);
    DatasetPreview preview(&form, &datasets, nullptr);
    QTRY_VERIFY_WITH_TIMEOUT(!preview.result().samples.empty(), 30000);
    // A directory with config.json but no tokenizer.json.
    QDir(tmp_.path()).mkpath(QStringLiteral("shape-only"));
    QFile::copy(QString::fromStdString(kModel + "/config.json"),
                tmp_.filePath(QStringLiteral("shape-only/config.json")));
    QVERIFY(!has_errors(form.set_text("model", '"' + tmp_.filePath(QStringLiteral("shape-only")).toStdString() + '"')));
    QTRY_VERIFY_WITH_TIMEOUT(preview.status()->text().contains(QStringLiteral("has no tokenizer.json")), 30000);
    QVERIFY(preview.result().samples.empty());
    QVERIFY(preview.text()->toPlainText().isEmpty());
    QVERIFY(!preview.text()->isVisibleTo(&preview));  // no empty pane under the message
    // A model that is not on this machine at all.
    QVERIFY(!has_errors(form.set_text("model", '"' + tmp_.filePath(QStringLiteral("gone")).toStdString() + '"')));
    QTRY_VERIFY_WITH_TIMEOUT(
        preview.status()->text().contains(QStringLiteral("choose a model directory with tokenizer.json")), 30000);
    // No training file.
    QVERIFY(!has_errors(form.set_text("model", '"' + kModel + '"')));
    QVERIFY(!has_errors(form.set_text("dataset", "[]")));
    QTRY_VERIFY(preview.status()->text().contains(QStringLiteral("Add a training file")));
  }
};

QTEST_MAIN(TstDatasetPreview)
#include "tst_dataset_preview.moc"
