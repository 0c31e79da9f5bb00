// Text helpers: did-you-mean, number formatting that round-trips, shell quoting/splitting.
#include <QtTest>

#include <cmath>
#include <random>

#include "common/text.h"

using namespace odyssey;

class TstText : public QObject {
  Q_OBJECT
 private slots:
  void editDistance() {
    QCOMPARE(text::edit_distance("", ""), std::size_t(0));
    QCOMPARE(text::edit_distance("kitten", "sitting"), std::size_t(3));
    QCOMPARE(text::edit_distance("lora_rnk", "lora_rank"), std::size_t(1));
  }
  void closest() {
    const std::vector<std::string> keys{"lora_rank", "lora_alpha", "max_length", "learning_rate"};
    QCOMPARE(QString::fromStdString(*text::closest("lora_rnk", keys)), QString("lora_rank"));
    QCOMPARE(QString::fromStdString(*text::closest("max_len", keys)), QString("max_length"));
    QVERIFY(!text::closest("completely_different", keys).has_value());
  }
  void formatDoubleRoundTrips() {
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<double> u(-1e6, 1e6);
    for (int i = 0; i < 2000; ++i) {
      const double v = i % 3 == 0 ? u(rng) : std::ldexp(u(rng), -(i % 40));
      const auto back = text::parse_double(text::format_double(v));
      QVERIFY(back.has_value());
      QCOMPARE(*back, v);  // exact, not fuzzy: presets must round-trip bit for bit
    }
    QCOMPARE(QString::fromStdString(text::format_double(1.0)), QString("1.0"));
    QCOMPARE(QString::fromStdString(text::format_double(1e-8)), QString("1e-08"));
  }
  void parseNumbers() {
    QCOMPARE(*text::parse_int("42"), std::int64_t(42));
    QCOMPARE(*text::parse_int("-1"), std::int64_t(-1));
    QVERIFY(!text::parse_int("4.5"));
    QVERIFY(!text::parse_int("12abc"));
    QVERIFY(!text::parse_int(""));
    QVERIFY(!text::parse_int("99999999999999999999999"));
    QVERIFY(!text::parse_double("nan"));
    QCOMPARE(*text::parse_double("2e-5"), 2e-5);
    QCOMPARE(*text::parse_bool("Yes"), true);
    QVERIFY(!text::parse_bool("maybe"));
  }
  void shellQuoteSplitRoundTrip() {
    const std::vector<std::string> words{"plain", "with space", "it's", "$(rm -rf ~)", "a\"b", "", "tab\there",
                                         "back\\slash", "data.jsonl#100", "#hash", "*glob?", "new\nline"};
    std::string line;
    for (const auto& w : words) line += text::shell_quote(w) + " ";
    std::string err;
    auto back = text::shell_split(line, &err);
    QVERIFY2(back.has_value(), err.c_str());
    QCOMPARE(back->size(), words.size());
    for (std::size_t i = 0; i < words.size(); ++i) QCOMPARE(QString::fromStdString((*back)[i]), QString::fromStdString(words[i]));
    QCOMPARE(QString::fromStdString(text::shell_quote("data.jsonl#100")), QString("data.jsonl#100"));
    QCOMPARE(QString::fromStdString(text::shell_quote("$(x)")), QString("'$(x)'"));
    QCOMPARE(QString::fromStdString(text::shell_quote("#x")), QString("'#x'"));
  }
  void shellSplitContinuationsAndErrors() {
    std::string err;
    auto w = text::shell_split("swift sft \\\n  --model 'Qwen/Qwen2.5-7B' \\\n  --dataset \"a b.jsonl\"  # comment\n", &err);
    QVERIFY(w.has_value());
    QCOMPARE(int(w->size()), 6);
    QCOMPARE(QString::fromStdString((*w)[5]), QString("a b.jsonl"));
    QVERIFY(!text::shell_split("swift sft --model 'unterminated", &err));
    QVERIFY(err.find("single quote") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TstText)
#include "tst_text.moc"
