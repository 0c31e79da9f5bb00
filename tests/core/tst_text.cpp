// Text helpers: did-you-mean, number formatting that round-trips, shell quoting/splitting.
#include <QtTest>

#include <cmath>
#include <limits>
#include <random>

#include "common/diagnostic.h"
#include "common/text.h"

using namespace odyssey;

class TstText : public QObject {
  Q_OBJECT
 private slots:
  // Issue 21 item 10: a 100 MB malformed line was quoted whole. Quoted input is cut to
  // kExcerptBytes, never inside a UTF-8 character, with the total length named.
  void excerptCutsLongInputAndNamesItsLength() {
    const std::string big(3'000'000, 'x');
    const std::string e = text::excerpt(big);
    QVERIFY(e.size() < 260);
    QVERIFY2(e.find("... (3000000 bytes in all)") != std::string::npos, e.c_str());
    QCOMPARE(text::excerpt("short"), std::string("short"));
    std::string accents;
    for (int i = 0; i < 150; ++i) accents += "\xc3\xa9";   // é, 2 bytes each
    const std::string cut = text::excerpt("a" + accents);  // byte 200 is the second byte of an é
    QCOMPARE(cut.find("..."), std::size_t(199));
    QVERIFY(text::clean_utf8(cut.substr(0, cut.find("..."))));
    const std::string q = text::quoted(big);
    QVERIFY(q.size() < 260);
    QVERIFY2(q.rfind("'... (3000000 bytes in all)") != std::string::npos, q.c_str());
    QCOMPARE(text::quoted(std::string("a\nb", 3)), std::string("'a\\x0ab'"));
  }
  void cleanUtf8() {
    std::size_t at = 99;
    std::string why;
    QVERIFY(text::clean_utf8("plain ascii, \xc3\xa9, \xe2\x82\xac, \xf0\x9f\x99\x82"));
    QVERIFY(!text::clean_utf8(std::string("ab\0c", 4), &at, &why));
    QCOMPARE(at, std::size_t(2));
    QCOMPARE(why, std::string("a NUL byte"));
    QVERIFY(!text::clean_utf8("/models/m\xff", &at, &why));
    QCOMPARE(at, std::size_t(9));
    QVERIFY(!text::clean_utf8("\xc0\xaf", &at));          // overlong '/'
    QVERIFY(!text::clean_utf8("\xed\xa0\x80", &at));      // a UTF-16 surrogate
    QVERIFY(!text::clean_utf8("\xf4\x90\x80\x80", &at));  // beyond U+10FFFF
    QVERIFY(!text::clean_utf8("\xe2\x82", &at));          // cut short
  }
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
    const std::vector<std::string> words{"plain",          "with space", "it's",      "$(rm -rf ~)",
                                         "a\"b",           "",           "tab\there", "back\\slash",
                                         "data.jsonl#100", "#hash",      "*glob?",    "new\nline"};
    std::string line;
    for (const auto& w : words) line += text::shell_quote(w) + " ";
    std::string err;
    auto back = text::shell_split(line, &err);
    QVERIFY2(back.has_value(), err.c_str());
    QCOMPARE(back->size(), words.size());
    for (std::size_t i = 0; i < words.size(); ++i)
      QCOMPARE(QString::fromStdString((*back)[i]), QString::fromStdString(words[i]));
    QCOMPARE(QString::fromStdString(text::shell_quote("data.jsonl#100")), QString("data.jsonl#100"));
    QCOMPARE(QString::fromStdString(text::shell_quote("$(x)")), QString("'$(x)'"));
    QCOMPARE(QString::fromStdString(text::shell_quote("#x")), QString("'#x'"));
  }
  void shellSplitContinuationsAndErrors() {
    std::string err;
    auto w =
        text::shell_split("swift sft \\\n  --model 'Qwen/Qwen2.5-7B' \\\n  --dataset \"a b.jsonl\"  # comment\n", &err);
    QVERIFY(w.has_value());
    QCOMPARE(int(w->size()), 6);
    QCOMPARE(QString::fromStdString((*w)[5]), QString("a b.jsonl"));
    QVERIFY(!text::shell_split("swift sft --model 'unterminated", &err));
    QVERIFY(err.find("single quote") != std::string::npos);
  }

  // The one diagnostic factory (common/diagnostic.h): what it names, in format()'s order; a
  // line or column past int's range (a 3-billion-line JSONL file) is clamped, not wrapped.
  void diagnosticFactory() {
    const Diagnostic e = error_at("data/train.jsonl", "messages", "expected a list");
    QCOMPARE(e.format(), std::string("data/train.jsonl: error: messages: expected a list"));
    QCOMPARE(error_at({}, {}, "no file").format(), std::string("error: no file"));
    const Diagnostic w = diagnostic_at(Severity::Warning, "f.jsonl", "text", "long", 12, 3);
    QCOMPARE(w.format(), std::string("f.jsonl:12:3: warning: text: long"));
    const Diagnostic far = diagnostic_at(Severity::Note, "f.jsonl", {}, "far", std::int64_t{3} << 30, -5);
    QCOMPARE(far.line, std::numeric_limits<int>::max());
    QCOMPARE(far.column, 0);
    QCOMPARE(far.format(), "f.jsonl:" + std::to_string(std::numeric_limits<int>::max()) + ": note: far");
  }
};

QTEST_APPLESS_MAIN(TstText)
#include "tst_text.moc"
