// Parity of Odyssey's tokenizer with Hugging Face tokenizers: the oracle is
// tests/reference/make_tokenizer_fixtures.py, run here with ODYSSEY_PYTHON (pinned
// tokenizers/transformers). It trains byte-level BPE tokenizers shaped like Qwen2.5, Llama-3
// and GPT-2 on a mixed corpus and writes the ids HF gives for held-out texts; every id,
// decode and NFC result must be identical. Bad input must give a diagnostic, never a crash.
#include <QtTest>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_nfc.h"

using namespace odyssey;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The oracle's output, generated once per version of the script (and Python) into the temp
// directory; tst_chat_template shares it.
QString fixtures(QString* error) {
  const QString python = QStringLiteral(ODYSSEY_PYTHON);
  const QString script = QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/make_tokenizer_fixtures.py");
  QFile f(script);
  if (!f.open(QIODevice::ReadOnly)) {
    *error = "cannot read " + script;
    return {};
  }
  QCryptographicHash h(QCryptographicHash::Sha1);
  h.addData(f.readAll());
  h.addData(python.toUtf8());
  const QString dir = QDir::temp().filePath("odyssey-tokenizer-fixtures-" + h.result().toHex().left(12));
  if (QFile::exists(dir + "/expected.json")) return dir;
  const QString tmp = dir + ".tmp-" + QUuid::createUuid().toString(QUuid::Id128);
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(python, {script, tmp});
  if (!p.waitForFinished(600000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    *error = python + " " + script + " failed:\n" + QString::fromUtf8(p.readAll());
    QDir(tmp).removeRecursively();
    return {};
  }
  if (!QDir().rename(tmp, dir)) QDir(tmp).removeRecursively();  // another test made it first
  return dir;
}

json read_json(const QString& path) {
  std::ifstream in(path.toStdString());
  return json::parse(in);
}

std::vector<std::int32_t> ids_of(const json& j) { return j.get<std::vector<std::int32_t>>(); }

std::string show(const std::string& s) {
  std::string out;
  for (const char c : s.substr(0, 120)) {
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return s.size() > 120 ? out + "..." : out;
}

std::string first_difference(const std::vector<std::int32_t>& got, const std::vector<std::int32_t>& want) {
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return "first difference at token " + std::to_string(i) + " (got " + std::to_string(got.size()) + " tokens, want " +
         std::to_string(want.size()) + ")";
}

// A minimal byte-level tokenizer.json: the 256 byte tokens, "ab" from one merge.
json minimal_tokenizer() {
  json vocab = json::object();
  std::string ch;
  for (int b = 0; b < 256; ++b) {
    ch.clear();
    const char32_t c = tok::byte_char(static_cast<std::uint8_t>(b));
    if (c < 0x80) {
      ch.push_back(static_cast<char>(c));
    } else {
      ch.push_back(static_cast<char>(0xC0 | (c >> 6)));
      ch.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    vocab[ch] = b;
  }
  vocab["ab"] = 256;
  json j = {{"version", "1.0"},
            {"added_tokens", json::array({{{"id", 257}, {"content", "<|end|>"}, {"special", true}}})},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}}};
  return j;
}

bool mentions(const Diagnostics& d, const std::string& what) { return format_all(d).find(what) != std::string::npos; }

}  // namespace

class TstTokenizer : public QObject {
  Q_OBJECT
  QString dir_;
  json expected_;

  void need_fixtures() {
    if (QStringLiteral(ODYSSEY_PYTHON).isEmpty())
      QSKIP(
          "ODYSSEY_PYTHON is empty: configure with -DODYSSEY_PYTHON=<python with the pinned transformers and "
          "tokenizers> to run the parity tests against Hugging Face");
    if (dir_.isEmpty()) {
      QString error;
      dir_ = fixtures(&error);
      QVERIFY2(!dir_.isEmpty(), qPrintable(error));
      expected_ = read_json(dir_ + "/expected.json");
    }
  }
  Tokenizer load(const std::string& name) {
    auto r = Tokenizer::load((dir_ + "/").toStdString() + name);
    if (!r.ok()) qFatal("%s", format_all(r.diagnostics).c_str());
    return r.value;
  }

 private slots:
  void encodeParity();
  void decodeParity();
  void nfcParity();
  void offsetsAgreeWithIds();
  void threadsAgree();
  void realModel();
  void specialTokenIds();
  void corruptFiles();
  void invalidUtf8();
  void emptyText();
  void tenMegabytes();
  void qwenShapedVocabulary();
  void benchmark();
};

void TstTokenizer::encodeParity() {
  need_fixtures();
  int compared = 0;
  for (const auto& [name, m] : expected_["models"].items()) {
    const Tokenizer t = load(m["dir"].get<std::string>());
    QCOMPARE(t.vocab_size(), m["vocab_size"].get<std::int32_t>());
    for (const json& c : m["encode"]) {
      const std::string text = c["text"].get<std::string>();
      for (const bool special : {false, true}) {
        auto got = t.encode(text, special);
        QVERIFY2(got.ok(), format_all(got.diagnostics).c_str());
        const auto want = ids_of(c[special ? "ids_special" : "ids"]);
        if (got.value != want)
          QFAIL((name + (special ? " (add_special_tokens)" : "") + ": " + first_difference(got.value, want) +
                 " for text '" + show(text) + "'")
                    .c_str());
        ++compared;
      }
      QCOMPARE(t.decode(ids_of(c["ids"]), false), c["decode"].get<std::string>());
      QCOMPARE(t.decode(ids_of(c["ids"]), true), c["decode_skip"].get<std::string>());
    }
  }
  qInfo("%d encodings identical to HF tokenizers %s", compared,
        expected_["versions"]["tokenizers"].get<std::string>().c_str());
}

void TstTokenizer::decodeParity() {
  need_fixtures();
  int compared = 0;
  for (const auto& [name, m] : expected_["models"].items()) {
    const Tokenizer t = load(m["dir"].get<std::string>());
    for (const json& c : m["decode"]) {
      QCOMPARE(t.decode(ids_of(c["ids"]), false), c["decode"].get<std::string>());
      QCOMPARE(t.decode(ids_of(c["ids"]), true), c["decode_skip"].get<std::string>());
      ++compared;
    }
  }
  qInfo("%d arbitrary id sequences decode as in HF", compared);
}

void TstTokenizer::nfcParity() {
  need_fixtures();
  for (const json& c : expected_["nfc"]) {
    const std::string in = c[0].get<std::string>(), want = c[1].get<std::string>();
    const std::string got = unicode::nfc(in);
    if (got != want) QFAIL(("NFC differs from HF for '" + show(in) + "'").c_str());
  }
  qInfo("%d NFC cases identical to HF", static_cast<int>(expected_["nfc"].size()));
}

void TstTokenizer::offsetsAgreeWithIds() {
  need_fixtures();
  for (const auto& [name, m] : expected_["models"].items()) {
    const Tokenizer t = load(m["dir"].get<std::string>());
    for (const json& c : m["encode"]) {
      const std::string text = c["text"].get<std::string>();
      auto e = t.encode_with_offsets(text, false);
      QVERIFY(e.ok());
      QCOMPARE(e.value.ids, ids_of(c["ids"]));
      QCOMPARE(e.value.offsets.size(), e.value.ids.size());
      std::size_t prev = 0;
      for (const auto& [b, en] : e.value.offsets) {
        QVERIFY(b <= en && en <= text.size());
        QVERIFY2(b + 64 >= prev, name.c_str());  // monotonic (lstrip may reach back over spaces)
        prev = b;
      }
    }
  }
}

void TstTokenizer::threadsAgree() {
  need_fixtures();
  const Tokenizer t = load("qwen2_5");
  const json& cases = expected_["models"]["qwen2_5"]["encode"];
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (std::size_t i = static_cast<std::size_t>(k); i < cases.size() * 3; i += 2) {
        const json& c = cases[i % cases.size()];
        if (t.encode(c["text"].get<std::string>()).value != ids_of(c["ids"])) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  QCOMPARE(bad.load(), 0);
}

void TstTokenizer::realModel() {
  const QByteArray model = qgetenv("ODYSSEY_TOKENIZER_MODEL");
  if (model.isEmpty() || QStringLiteral(ODYSSEY_PYTHON).isEmpty())
    QSKIP(
        "set ODYSSEY_TOKENIZER_MODEL to a model directory (e.g. Qwen2.5-7B-Instruct) to compare with its "
        "real tokenizer");
  QTemporaryDir tmp;
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(QStringLiteral(ODYSSEY_PYTHON),
          {QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/make_tokenizer_fixtures.py"), "--real",
           QString::fromLocal8Bit(model), tmp.path()});
  QVERIFY(p.waitForFinished(600000));
  QVERIFY2(p.exitCode() == 0, p.readAll().constData());
  const json e = read_json(tmp.path() + "/expected.json");
  auto r = Tokenizer::load(model.toStdString());
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  int n = 0;
  for (const json& c : e["models"]["real"]["encode"]) {
    QCOMPARE(r.value.encode(c["text"].get<std::string>()).value, ids_of(c["ids"]));
    QCOMPARE(r.value.encode(c["text"].get<std::string>(), true).value, ids_of(c["ids_special"]));
    QCOMPARE(r.value.decode(ids_of(c["ids"])), c["decode"].get<std::string>());
    ++n;
  }
  qInfo("%d texts identical with the real tokenizer of %s", n, model.constData());
}

void TstTokenizer::specialTokenIds() {
  need_fixtures();
  const Tokenizer q = load("qwen2_5");
  QCOMPARE(q.eos_token(), std::string("<|im_end|>"));
  QCOMPARE(q.eos_id(), q.token_to_id("<|im_end|>"));
  QVERIFY(q.pad_id().has_value());
  QVERIFY(!q.bos_id().has_value());
  QVERIFY(q.is_special(*q.token_to_id("<|im_start|>")));
  QVERIFY(!q.is_special(*q.token_to_id("<think>")));
  QCOMPARE(q.id_to_token(*q.token_to_id("<|im_end|>")), std::optional<std::string>("<|im_end|>"));
  const Tokenizer l = load("llama3_1");
  QCOMPARE(l.bos_id(), l.token_to_id("<|begin_of_text|>"));
  QCOMPARE(l.encode("", true).value, std::vector<std::int32_t>{*l.bos_id()});
  QVERIFY(!l.chat_template_source().empty());
}

void TstTokenizer::corruptFiles() {
  QTemporaryDir tmp;
  const std::string d = tmp.path().toStdString();
  auto write_and_load = [&](const std::string& name, const std::string& text) {
    fs::create_directories(d + "/" + name);
    std::ofstream(d + "/" + name + "/tokenizer.json") << text;
    return Tokenizer::load(d + "/" + name);
  };
  QVERIFY(Tokenizer::from_json(minimal_tokenizer().dump(), "ok.json").ok());
  // Broken JSON: file, line and column.
  auto r = write_and_load("broken", "{\n  \"model\": {\"type\": \"BPE\",,}\n}");
  QVERIFY(!r.ok());
  QVERIFY2(mentions(r.diagnostics, d + "/broken/tokenizer.json:2:"), format_all(r.diagnostics).c_str());
  QVERIFY(mentions(r.diagnostics, "not valid JSON"));
  r = write_and_load("truncated", minimal_tokenizer().dump().substr(0, 300));
  QVERIFY(!r.ok());
  // Missing model.
  json j = minimal_tokenizer();
  j.erase("model");
  r = write_and_load("nomodel", j.dump());
  QVERIFY(mentions(r.diagnostics, "nomodel/tokenizer.json: error: model: missing"));
  // Merges naming tokens that are not in the vocabulary.
  j = minimal_tokenizer();
  j["model"]["merges"] = json::array({"a b", "zz q", json::array({"a", "\xE2\x82\xAC"})});
  r = write_and_load("badmerge", j.dump());
  QVERIFY2(mentions(r.diagnostics, "model.merges[1]: token 'zz' is not in the vocabulary"),
           format_all(r.diagnostics).c_str());
  QVERIFY(mentions(r.diagnostics, "model.merges[2]"));
  j = minimal_tokenizer();
  for (int i = 0; i < 1000; ++i) j["model"]["merges"].push_back("x" + std::to_string(i) + " y");
  r = write_and_load("manymerges", j.dump());
  QCOMPARE(r.diagnostics.size(), std::size_t{21});
  QVERIFY(mentions(r.diagnostics, "... and 980 more errors"));
  j = minimal_tokenizer();
  j["model"]["merges"] = json::array({"b a"});
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "merged token 'ba' is not in the vocabulary"));
  // Unsupported components are refused by type.
  j = minimal_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  r = write_and_load("metaspace", j.dump());
  QVERIFY2(mentions(r.diagnostics,
                    "metaspace/tokenizer.json: error: pre_tokenizer.type: pre_tokenizer 'Metaspace' is "
                    "not supported"),
           format_all(r.diagnostics).c_str());
  j = minimal_tokenizer();
  j["model"]["type"] = "Unigram";
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "model type 'Unigram' is not supported"));
  j = minimal_tokenizer();
  j["normalizer"] = {{"type", "NFKC"}};
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "normalizer 'NFKC' is not supported"));
  j = minimal_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "decoder 'WordPiece' is not supported"));
  j = minimal_tokenizer();
  j["model"]["byte_fallback"] = true;
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "byte_fallback"));
  j = minimal_tokenizer();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "the regex does not compile"));
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}};
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "has no ByteLevel step"));
  j = minimal_tokenizer();  // wrong JSON types where a string or number belongs
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", 5}};
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "x.json: error: unexpected value"));
  j = minimal_tokenizer();
  j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", json::array({{{"SpecialToken", {{"id", 3}}}}})}};
  QVERIFY(!Tokenizer::from_json(j.dump(), "x.json").ok());
  fs::create_directories(d + "/badconfig");
  std::ofstream(d + "/badconfig/tokenizer.json") << minimal_tokenizer().dump();
  std::ofstream(d + "/badconfig/tokenizer_config.json") << "{\"chat_template\": [{\"name\": 1}], \"eos_token\": 2}";
  QVERIFY(mentions(Tokenizer::load(d + "/badconfig").diagnostics,
                   "badconfig/tokenizer_config.json: error: unexpected value"));
  std::ofstream(d + "/badconfig/tokenizer_config.json") << "{\"eos_token\": ";
  QVERIFY(mentions(Tokenizer::load(d + "/badconfig").diagnostics, "badconfig/tokenizer_config.json:1:"));
  // A processor's chat_template.json: the template when the tokenizer has none, never over
  // tokenizer_config.json's; a malformed one is an error naming it.
  fs::create_directories(d + "/processor");
  std::ofstream(d + "/processor/tokenizer.json") << minimal_tokenizer().dump();
  std::ofstream(d + "/processor/chat_template.json") << R"({"chat_template": "{{ messages[0]['content'] }}"})";
  auto proc = Tokenizer::load(d + "/processor");
  QVERIFY2(proc.ok(), format_all(proc.diagnostics).c_str());
  QCOMPARE(proc.value.chat_template_source(), std::string("{{ messages[0]['content'] }}"));
  QVERIFY(proc.value.chat_template_file().ends_with("processor/chat_template.json"));
  std::ofstream(d + "/processor/tokenizer_config.json") << R"({"chat_template": "{{ 'own' }}"})";
  proc = Tokenizer::load(d + "/processor");
  QVERIFY2(proc.ok(), format_all(proc.diagnostics).c_str());
  QCOMPARE(proc.value.chat_template_source(), std::string("{{ 'own' }}"));
  fs::remove(d + "/processor/tokenizer_config.json");
  std::ofstream(d + "/processor/chat_template.json") << R"({"chat_template": ["a"]})";
  QVERIFY2(mentions(Tokenizer::load(d + "/processor").diagnostics,
                    "processor/chat_template.json: error: chat_template: missing or not a string"),
           format_all(Tokenizer::load(d + "/processor").diagnostics).c_str());
  std::ofstream(d + "/processor/chat_template.json") << R"({"chat_template": )";
  QVERIFY(mentions(Tokenizer::load(d + "/processor").diagnostics, "processor/chat_template.json:1:"));
  j = minimal_tokenizer();
  j["model"]["vocab"]["a"] = "seven";
  QVERIFY(mentions(Tokenizer::from_json(j.dump(), "x.json").diagnostics, "model.vocab.a"));
  r = Tokenizer::load(d + "/does-not-exist");
  QVERIFY2(mentions(r.diagnostics, "does-not-exist: error: does not exist"), format_all(r.diagnostics).c_str());
  fs::create_directories(d + "/empty-dir");
  QVERIFY(
      mentions(Tokenizer::load(d + "/empty-dir").diagnostics, "empty-dir/tokenizer.json: error: no tokenizer.json"));
  QVERIFY(!Tokenizer::from_json("", "empty.json").ok());
  QVERIFY(!Tokenizer::from_json("[1,2]", "array.json").ok());
}

void TstTokenizer::invalidUtf8() {
  const Tokenizer t = Tokenizer::from_json(minimal_tokenizer().dump(), "m.json").value;
  struct Case {
    std::string text;
    std::size_t offset;
  };
  const Case cases[] = {{"abc\xC3\x28", 3},
                        {"ok\n\xFF", 3},
                        {"\xED\xA0\x80 surrogate", 0},
                        {"\xC0\xAF overlong", 0},
                        {"x\xF4\x90\x80\x80", 1},
                        {"trunc\xE2\x82", 5},
                        {"\x80", 0}};
  for (const Case& c : cases) {
    auto r = t.encode(c.text);
    QVERIFY(!r.ok());
    QVERIFY(r.value.empty());
    QVERIFY2(mentions(r.diagnostics, "invalid UTF-8 at byte offset " + std::to_string(c.offset)),
             format_all(r.diagnostics).c_str());
  }
  auto r = t.encode("line one\nline two \xFE");
  QCOMPARE(r.diagnostics.at(0).line, 2);
  QCOMPARE(r.diagnostics.at(0).column, 10);
  // Decoding ids that cut a character gives U+FFFD, as HF does.
  const auto e = t.encode("\xE2\x82\xAC").value;  // the euro sign: three byte tokens
  QCOMPARE(e.size(), std::size_t{3});
  QCOMPARE(t.decode(std::vector<std::int32_t>{e[0], e[1]}), std::string("\xEF\xBF\xBD"));
  QCOMPARE(t.decode(std::vector<std::int32_t>{-5, 1 << 30}), std::string());
}

void TstTokenizer::emptyText() {
  const Tokenizer t = Tokenizer::from_json(minimal_tokenizer().dump(), "m.json").value;
  auto r = t.encode("");
  QVERIFY(r.ok());
  QVERIFY(r.value.empty());
  QCOMPARE(t.decode({}), std::string());
  QCOMPARE(t.encode("ab<|end|>").value, (std::vector<std::int32_t>{256, 257}));
  QCOMPARE(Tokenizer().encode("x").ok(), false);
}

void TstTokenizer::tenMegabytes() {
  need_fixtures();
  const Tokenizer t = load("qwen2_5");
  std::string text;
  const json& cases = expected_["models"]["qwen2_5"]["encode"];
  for (std::size_t i = 0; text.size() < 10'000'000; ++i) text += cases[i % cases.size()]["text"].get<std::string>();
  text += std::string(100'000, ' ') + "end";  // one long whitespace run
  const auto t0 = std::chrono::steady_clock::now();
  auto r = t.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(t.decode(r.value), unicode::nfc(text));
  qInfo("10 MB: %zu tokens in %.2f s (%.1f MB/s, this build type)", r.value.size(), s,
        static_cast<double>(text.size()) / 1e6 / s);
}

void TstTokenizer::qwenShapedVocabulary() {
  // Qwen2.5's shape: 151,643 model tokens and 22 added tokens from id 151643; load and encode.
  json j = minimal_tokenizer();
  json& vocab = j["model"]["vocab"];
  json merges = json::array({"a b"});
  std::vector<std::string> byte_tokens;
  for (const auto& [k, v] : vocab.items())
    if (v.get<int>() < 256) byte_tokens.push_back(k);
  std::int32_t next = 257;
  for (std::size_t i = 0; next < 151643; ++i) {
    const std::string& a = byte_tokens[i % 256];
    const std::string& b = byte_tokens[(i / 256) % 256];
    const std::string c = i < 65536 ? "" : byte_tokens[(i / 65536) % 256];
    if (!c.empty()) {
      if (!vocab.contains(a + b)) continue;
      if (vocab.contains(a + b + c)) continue;
      vocab[a + b + c] = next++;
      merges.push_back(a + b + " " + c);
    } else if (!vocab.contains(a + b)) {
      vocab[a + b] = next++;
      merges.push_back(a + " " + b);
    }
  }
  j["model"]["merges"] = merges;
  json added = json::array();
  for (int k = 0; k < 22; ++k)
    added.push_back({{"id", 151643 + k}, {"content", "<|extra_" + std::to_string(k) + "|>"}, {"special", k < 14}});
  j["added_tokens"] = added;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Tokenizer::from_json(j.dump(), "qwen-shaped.json");
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  qInfo("Qwen-shaped vocabulary (%d ids, %zu merges) loads in %.2f s", r.value.vocab_size(), merges.size(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  QCOMPARE(r.value.vocab_size(), 151665);
  const auto ids = r.value.encode("hello <|extra_3|> world<|extra_21|>").value;
  QVERIFY(std::find(ids.begin(), ids.end(), 151646) != ids.end());
  QCOMPARE(ids.back(), 151664);
  for (const std::int32_t id : ids) QVERIFY(id >= 0 && id < 151665);
  QCOMPARE(r.value.decode(ids), std::string("hello <|extra_3|> world<|extra_21|>"));
  QCOMPARE(r.value.decode(ids, true), std::string("hello  world<|extra_21|>"));  // extra_21 is not special
}

void TstTokenizer::benchmark() {
  // Throughput against HF (docs/tokenizer.md): ODYSSEY_TOKENIZER_BENCH=1 in a Release build.
  // Both encode the same ~10 MB of held-out documents one at a time on one thread.
  if (qgetenv("ODYSSEY_TOKENIZER_BENCH").isEmpty()) QSKIP("set ODYSSEY_TOKENIZER_BENCH=1 (Release build)");
  need_fixtures();
  std::mt19937 rng(7);
  const json& cases = expected_["models"]["qwen2_5"]["encode"];
  std::vector<std::string> docs;
  std::size_t bytes = 0;
  while (bytes < 10'000'000) {
    docs.push_back(cases[rng() % cases.size()]["text"].get<std::string>());
    bytes += docs.back().size();
  }
  QTemporaryDir tmp;
  const QString docs_file = tmp.filePath("docs.json");
  std::ofstream(docs_file.toStdString(), std::ios::binary) << json(docs).dump();
  for (const char* name : {"qwen2_5", "llama3_1"}) {
    const Tokenizer t = load(name);
    double best = 1e9;
    std::size_t n = 0;
    for (int rep = 0; rep < 3; ++rep) {
      t.clear_cache();
      n = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const std::string& d : docs) n += t.encode(d).value.size();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    qInfo("odyssey %s: %.2f MB, %zu tokens, %.3f s, %.2f MB/s", name, static_cast<double>(bytes) / 1e6, n, best,
          static_cast<double>(bytes) / 1e6 / best);
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(ODYSSEY_PYTHON),
            {QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/make_tokenizer_fixtures.py"), "--bench",
             dir_ + "/" + name + "/tokenizer.json", docs_file});
    QVERIFY(p.waitForFinished(600000));
    qInfo("%s (%s)", p.readAll().trimmed().constData(), name);
  }
}

QTEST_APPLESS_MAIN(TstTokenizer)
#include "tst_tokenizer.moc"
