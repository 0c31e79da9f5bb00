// Training data (core/data): dataset files in the three formats, malformed-record policy and
// its diagnostics, #N sampling, mixing, the validation split, tokenization with the chat
// templates' loss masks (real tokenizers from tests/reference/make_tokenizer_fixtures.py, the
// fixtures tst_tokenizer and tst_chat_template use), truncation, packing, padding-free rows
// and the token cache (hits, misses, damaged files).
#include <algorithm>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "config/train_config.h"
#include "data/dataset.h"
#include "data/packing.h"
#include "data/token_cache.h"
#include "data/tokenize.h"
#include "tokenizer/tokenizer.h"

using namespace odyssey;
using namespace odyssey::data;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Same as tst_tokenizer's: the oracle's output, generated once per script version.
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

bool contains(const Diagnostics& d, const std::string& needle) {
  return format_all(d).find(needle) != std::string::npos;
}

std::size_t count_of(const Diagnostics& d, Severity s) {
  return static_cast<std::size_t>(
      std::count_if(d.begin(), d.end(), [&](const Diagnostic& x) { return x.severity == s; }));
}

json msg(const char* role, const char* content) { return {{"role", role}, {"content", content}}; }
json turn(const char* from, const char* value) { return {{"from", from}, {"value", value}}; }

std::string alpaca(const std::string& instruction, const std::string& output, const std::string& input = {}) {
  json j = {{"instruction", instruction}, {"input", input}, {"output", output}};
  return j.dump() + "\n";
}

std::string messages_line(const std::string& user, const std::string& answer) {
  json j = {
      {"messages", json::array({{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", answer}}})}};
  return j.dump() + "\n";
}

std::vector<std::vector<std::int32_t>> label_runs(const TokenizedSample& s) {
  std::vector<std::vector<std::int32_t>> runs;
  bool in = false;
  for (std::size_t i = 0; i < s.labels.size(); ++i) {
    if (s.labels[i] == kIgnoreIndex) {
      in = false;
      continue;
    }
    if (!in) runs.emplace_back();
    in = true;
    runs.back().push_back(s.labels[i]);
  }
  return runs;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace

class TstDataset : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString fixtures_;
  std::map<std::string, Tokenizer> tokenizers_;

  std::string write(const std::string& name, const std::string& content) {
    const std::string path = (fs::path(tmp_.path().toStdString()) / name).string();
    fs::create_directories(fs::path(path).parent_path());
    write_bytes(path, content);
    return path;
  }

  // A real tokenizer (HF-trained, saved with the model's real chat template).
  const Tokenizer* tokenizer(const std::string& name) {
    if (QStringLiteral(ODYSSEY_PYTHON).isEmpty()) return nullptr;
    if (fixtures_.isEmpty()) {
      QString error;
      fixtures_ = fixtures(&error);
      if (fixtures_.isEmpty()) {
        qWarning("%s", qPrintable(error));
        return nullptr;
      }
    }
    if (!tokenizers_.count(name)) {
      auto r = Tokenizer::load((fixtures_ + "/").toStdString() + name);
      if (!r.ok()) {
        qWarning("%s", format_all(r.diagnostics).c_str());
        return nullptr;
      }
      tokenizers_[name] = r.value;
    }
    return &tokenizers_[name];
  }

 private slots:
  void initTestCase() { QVERIFY(tmp_.isValid()); }
  void formats();
  void jsonArray();
  void mixedFormats();
  void malformedRecords();
  void toolConversations();
  void ratioThreshold();
  void badFiles();
  void sampling();
  void mixing();
  void split();
  void labels();
  void defaultSystem();
  void truncation();
  void templates();
  void parallelDeterminism();
  void packing();
  void rows();
  void sha256();
  void cache();
  void damagedCache();
  void longMalformedLineIsCut();
  void sampleCountBounds();
  void fifoDatasetIsRefused();
  void forgedCacheIdsAreRebuilt();
};

void TstDataset::formats() {
  std::string a;
  a += alpaca("Add 2 and 3.", "5");
  a += "\n   \n";  // blank lines are skipped, line numbers stay physical
  a += alpaca("Translate to English.", "hello", "bonjour");
  a += json({{"instruction", "Greet."}, {"output", "Hi!"}, {"system", "You are terse."}}).dump() + "\n";
  a += json({{"instruction", ""}, {"input", "only input"}, {"output", "ok"}}).dump() + "\n";
  a += json({{"instruction", "Q2"}, {"output", "A2"}, {"history", json::array({json::array({"Q1", "A1"})})}}).dump();
  const std::string ap = write("fmt/alpaca.jsonl", a);
  auto r = read_dataset_file(ap);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.diagnostics.size(), std::size_t{0});
  QCOMPARE(r.value.report.format, std::string("alpaca"));
  QCOMPARE(r.value.report.lines, std::int64_t{5});
  QCOMPARE(r.value.report.samples, std::int64_t{5});
  const auto& s = r.value.samples;
  QCOMPARE(s.size(), std::size_t{5});
  QCOMPARE(s[0].origin, ap + ":1");
  QCOMPARE(s[0].messages.size(), std::size_t{2});
  QCOMPARE(s[0].messages[0].role, std::string("user"));
  QCOMPARE(s[0].messages[0].content, std::string("Add 2 and 3."));
  QCOMPARE(s[0].messages[1].role, std::string("assistant"));
  QCOMPARE(s[0].messages[1].content, std::string("5"));
  QCOMPARE(s[1].origin, ap + ":4");
  QCOMPARE(s[1].messages[0].content, std::string("Translate to English.\nbonjour"));
  QCOMPARE(s[2].messages.size(), std::size_t{3});
  QCOMPARE(s[2].messages[0].role, std::string("system"));
  QCOMPARE(s[2].messages[0].content, std::string("You are terse."));
  QCOMPARE(s[3].messages[0].content, std::string("only input"));
  QCOMPARE(s[4].messages.size(), std::size_t{4});
  QCOMPARE(s[4].messages[0].content, std::string("Q1"));
  QCOMPARE(s[4].messages[1].content, std::string("A1"));
  QCOMPARE(s[4].messages[2].content, std::string("Q2"));

  // ShareGPT: human/user, gpt/assistant, a system key or a first system turn; UTF-8 kept.
  std::string g;
  g += json({{"system", "Be brief."},
             {"conversations",
              json::array({turn("human", "Hi \xE4\xBD\xA0\xE5\xA5\xBD"), turn("gpt", "Hello \xF0\x9F\x98\x80"),
                           turn("user", "Bye"), turn("assistant", "Bye!")})}})
           .dump() +
       "\r\n";  // CRLF
  g +=
      json({{"conversations", json::array({turn("system", "S"), turn("human", "U"), turn("gpt", "A")})}}).dump() + "\n";
  const std::string gp = write("fmt/sharegpt.jsonl", g);
  r = read_dataset_file(gp);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.report.format, std::string("sharegpt"));
  QCOMPARE(r.value.samples.size(), std::size_t{2});
  const auto& m = r.value.samples[0].messages;
  QCOMPARE(m.size(), std::size_t{5});
  QCOMPARE(m[0].role, std::string("system"));
  QCOMPARE(m[1].role, std::string("user"));
  QCOMPARE(m[1].content, std::string("Hi \xE4\xBD\xA0\xE5\xA5\xBD"));
  QCOMPARE(m[2].role, std::string("assistant"));
  QCOMPARE(m[2].content, std::string("Hello \xF0\x9F\x98\x80"));
  QCOMPARE(m[4].content, std::string("Bye!"));
  QCOMPARE(r.value.samples[1].messages[0].role, std::string("system"));
  QCOMPARE(r.value.samples[1].origin, gp + ":2");

  // messages (OpenAI style), with a system message; a UTF-8 BOM is ignored.
  std::string mm = "\xEF\xBB\xBF";
  mm += json({{"messages", json::array({msg("system", "S"), msg("user", "U1"), msg("assistant", "A1"),
                                        msg("user", "U2"), msg("assistant", "A2")})}})
            .dump() +
        "\n";
  json withReasoning = {{"messages", json::array({msg("user", "U"), msg("assistant", "A")})}};
  withReasoning["messages"][1]["reasoning_content"] = "because";
  mm += withReasoning.dump() + "\n";
  const std::string mp = write("fmt/messages.jsonl", mm);
  r = read_dataset_file(mp);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.report.format, std::string("messages"));
  QCOMPARE(r.value.samples[0].messages.size(), std::size_t{5});
  QCOMPARE(r.value.samples[0].messages[0].content, std::string("S"));
  QCOMPARE(r.value.samples[0].messages[4].content, std::string("A2"));
  QCOMPARE(r.value.samples[1].messages[1].reasoning_content, std::optional<std::string>("because"));

  // The quickstart's own files.
  for (const char* f : {"train.jsonl", "val.jsonl"}) {
    auto q = read_dataset_file(std::string(ODYSSEY_SOURCE_DIR "/resources/quickstart/data/") + f);
    QVERIFY2(q.ok(), format_all(q.diagnostics).c_str());
    QVERIFY(q.value.report.samples > 0);
    QCOMPARE(q.value.report.malformed, std::int64_t{0});
  }
  QVERIFY(summary(r.value.report).find("messages, 2 records, 2 samples, 0 malformed, 2 selected") != std::string::npos);
}

void TstDataset::jsonArray() {
  json arr = json::array();
  arr.push_back({{"messages", json::array({msg("user", "U0"), msg("assistant", "A0")})}});
  arr.push_back({{"messages", json::array({msg("user", "U1"), msg("assistant", "A1")})}});
  arr.push_back({{"messages", json::array({msg("assistant", "A"), msg("user", "U")})}});  // bad order
  for (int i = 0; i < 97; ++i) arr.push_back({{"messages", json::array({msg("user", "U"), msg("assistant", "A")})}});
  const std::string path = write("arr/data.json", arr.dump(2));
  LoadOptions o;
  o.max_bad_sample_ratio = 0.05;
  auto r = read_dataset_file(path, o);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.report.lines, std::int64_t{100});
  QCOMPARE(r.value.report.samples, std::int64_t{99});
  QCOMPARE(r.value.report.malformed, std::int64_t{1});
  QCOMPARE(r.value.samples[1].origin, path + ":[1]");
  QCOMPARE(r.value.samples[2].origin, path + ":[3]");
  QVERIFY2(contains(r.diagnostics, path + ": warning: [2].messages[0].role: expected a user turn here"),
           format_all(r.diagnostics).c_str());

  // Broken JSON in an array: the file fails with line and column.
  const std::string broken = write("arr/broken.json", "[\n  {\"messages\": []},\n  {\"messages\" []}\n]\n");
  r = read_dataset_file(broken);
  QVERIFY(!r.ok());
  QVERIFY2(contains(r.diagnostics, broken + ":3:15: error: not a valid JSON array: syntax error"),
           format_all(r.diagnostics).c_str());
  const std::string empty = write("arr/empty.json", " [ ] ");
  r = read_dataset_file(empty);
  QVERIFY(!r.ok());
  QVERIFY2(contains(r.diagnostics, empty + ": error: the JSON array is empty"), format_all(r.diagnostics).c_str());
  // A .json file holding JSON Lines is read as JSON Lines.
  const std::string lines = write("arr/lines.json", messages_line("u", "a") + messages_line("u2", "a2"));
  r = read_dataset_file(lines);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.samples.size(), std::size_t{2});
}

void TstDataset::mixedFormats() {
  std::string text = alpaca("a", "b") + alpaca("c", "d");
  text += json({{"conversations", json::array({turn("human", "x"), turn("gpt", "y")})}}).dump() + "\n";
  text += messages_line("u", "a");
  const std::string path = write("mixed.jsonl", text);
  auto r = read_dataset_file(path);
  QVERIFY(!r.ok());
  QCOMPARE(r.value.report.format, std::string("alpaca"));
  QCOMPARE(r.value.report.malformed, std::int64_t{2});
  QVERIFY2(contains(r.diagnostics,
                    path + ": error: 2 of 4 records (50%) are malformed, more than max_bad_sample_ratio 0.01"),
           format_all(r.diagnostics).c_str());
  QVERIFY(contains(r.diagnostics, path + ":3: error: this record is in sharegpt format, but the file is alpaca "
                                         "(detected from line 1); a file holds one format"));
  QVERIFY(contains(r.diagnostics, path + ":4: error: this record is in messages format, but the file is alpaca"));
  // The format comes from the first valid record: a bad first record does not decide it.
  const std::string later = write("later.jsonl", json({{"messages", 5}}).dump() + "\n" + alpaca("a", "b"));
  LoadOptions o;
  o.max_bad_sample_ratio = 0.5;
  r = read_dataset_file(later, o);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.report.format, std::string("alpaca"));
  QVERIFY(contains(r.diagnostics,
                   later + ":1: warning: messages: expected an array of {role, content} messages, found number"));
}

void TstDataset::malformedRecords() {
  std::string text;
  for (int i = 0; i < 40; ++i) text += messages_line("u" + std::to_string(i), "a");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"messages\": [ {\"role\": \"user\"", "not valid JSON: syntax error"},
      {"[1, 2]", "expected a JSON object, found array"},
      {json({{"messages", json::array({msg("user", "u"), {{"role", "assistant"}, {"content", 7}}})}}).dump(),
       "messages[1].content: expected a string, found number"},
      {json({{"messages", json::array({msg("user", "u"), msg("user", "u2")})}}).dump(),
       "messages[1].role: expected an assistant turn here, found a user turn"},
      {json({{"messages", json::array({msg("user", "u"), msg("assistant", "a"), msg("user", "u2")})}}).dump(),
       "messages[2].role: the conversation ends with a user turn; it must end with the assistant's answer"},
      {json({{"messages", json::array({msg("user", "u"), msg("assistant", " \n")})}}).dump(),
       "messages[1].content: the assistant's answer is empty"},
      {json({{"messages", json::array({msg("user", "u"), msg("tool", "{}")})}}).dump(),
       "messages[1].role: expected an assistant turn here, found a tool result"},
      {json({{"messages", json::array({msg("user", "u"), msg("system", "s"), msg("assistant", "a")})}}).dump(),
       "messages[1].role: a system turn is only allowed first"},
      {json({{"messages", json::array({{{"content", "u"}}, msg("assistant", "a")})}}).dump(),
       "messages[0].role: missing; expected a string"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"bad \xFF byte\"}, {\"role\": \"assistant\", \"content\": "
       "\"a\"}]}",
       ":50:48: warning: invalid UTF-8 (byte 0xFF); the file must be UTF-8"},
      // Deep nesting would overflow the JSON parser's stack: refused before it parses.
      {"{\"messages\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
       ":51: warning: nested 100001 levels deep; at most 256 are accepted"},
  };
  for (const auto& [line, what] : bad) text += line + "\n";
  const std::string path = write("malformed.jsonl", text);
  LoadOptions o;
  o.max_bad_sample_ratio = 0.25;
  o.max_listed = 20;
  auto r = read_dataset_file(path, o);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.report.lines, std::int64_t{51});
  QCOMPARE(r.value.report.samples, std::int64_t{40});
  QCOMPARE(r.value.report.malformed, std::int64_t{11});
  QVERIFY(contains(r.diagnostics,
                   path + ": warning: skipped 11 malformed of 51 records (within max_bad_sample_ratio 0.25)"));
  for (std::size_t k = 0; k < bad.size(); ++k) {
    const std::string where = path + ":" + std::to_string(41 + k) + ":";
    QVERIFY2(contains(r.diagnostics, bad[k].second), (bad[k].second + "\n" + format_all(r.diagnostics)).c_str());
    QVERIFY2(contains(r.diagnostics, where), (where + "\n" + format_all(r.diagnostics)).c_str());
  }
  QCOMPARE(count_of(r.diagnostics, Severity::Error), std::size_t{0});

  // Other formats' checks.
  std::string g;
  g += json({{"conversations", json::array({turn("human", "x"), turn("bot", "y")})}}).dump() + "\n";
  g += json({{"system", "s"},
             {"conversations", json::array({turn("system", "x"), turn("human", "y"), turn("gpt", "z")})}})
           .dump() +
       "\n";
  g += json({{"conversations", "text"}}).dump() + "\n";
  g += json({{"conversations", json::array({turn("human", "x"), turn("gpt", "y")})}}).dump() + "\n";
  g += alpaca("only", "") + json({{"instruction", 3}, {"output", "x"}}).dump() + "\n" +
       json({{"instruction", "i"}}).dump() + "\n";
  const std::string gp = write("malformed_sharegpt.jsonl", g);
  o.max_bad_sample_ratio = 1.0;
  r = read_dataset_file(gp, o);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.report.samples, std::int64_t{1});
  QVERIFY(contains(r.diagnostics, gp + ":1: warning: conversations[1].from: found 'bot'; expected human, user, gpt, "
                                       "assistant, system, function_call or observation"));
  QVERIFY(contains(r.diagnostics, gp + ":2: warning: system: a system prompt is given twice"));
  QVERIFY(contains(r.diagnostics,
                   gp + ":3: warning: conversations: expected an array of {from, value} turns, found string"));
  QVERIFY(contains(r.diagnostics, gp + ":5: warning: this record is in alpaca format, but the file is sharegpt"));
  // As alpaca files, the same records say what alpaca expects.
  const std::string ap = write("malformed_alpaca.jsonl", alpaca("ok", "fine") + alpaca("only", "") +
                                                             json({{"instruction", 3}, {"output", "x"}}).dump() + "\n" +
                                                             json({{"instruction", "i"}}).dump() + "\n");
  r = read_dataset_file(ap, o);
  QVERIFY(contains(r.diagnostics, ap + ":2: warning: output: the assistant's answer is empty"));
  QVERIFY(contains(r.diagnostics, ap + ":3: warning: instruction: expected a string, found number"));
  QVERIFY(contains(r.diagnostics, ap + ":4: warning: output: missing; expected a string"));
}

void TstDataset::ratioThreshold() {
  std::string text;
  for (int i = 0; i < 9; ++i) text += alpaca("q", "a");
  text += "not json\n";
  const std::string path = write("ratio.jsonl", text);
  LoadOptions o;
  o.max_bad_sample_ratio = 0.1;  // 1 of 10 = 0.1: allowed
  auto r = read_dataset_file(path, o);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.samples.size(), std::size_t{9});
  QVERIFY(contains(r.diagnostics, path + ":10:2: warning: not valid JSON: syntax error"));
  o.max_bad_sample_ratio = 0.05;
  r = read_dataset_file(path, o);
  QVERIFY(!r.ok());
  QVERIFY(r.value.samples.empty());
  QCOMPARE(r.value.report.malformed, std::int64_t{1});
  QVERIFY2(contains(r.diagnostics,
                    path + ": error: 1 of 10 records (10%) are malformed, more than max_bad_sample_ratio 0.05 allows"),
           format_all(r.diagnostics).c_str());
  QVERIFY(contains(r.diagnostics, path + ":10:2: error: not valid JSON"));

  // Many bad records: the first ten are listed, then a count.
  std::string many;
  for (int i = 0; i < 10; ++i) many += alpaca("q", "a");
  for (int i = 0; i < 15; ++i) many += "{\"instruction\": 1, \"output\": \"x\"}\n";
  const std::string mp = write("ratio_many.jsonl", many);
  r = read_dataset_file(mp);
  QVERIFY(!r.ok());
  QVERIFY(contains(r.diagnostics, mp + ": error: 15 of 25 records (60%) are malformed"));
  QVERIFY(contains(r.diagnostics, mp + ":20: error: instruction: expected a string"));
  QVERIFY(!contains(r.diagnostics, mp + ":21:"));
  QVERIFY(contains(r.diagnostics, mp + ": note: ... and 5 more malformed records"));
}

void TstDataset::badFiles() {
  const std::string base = tmp_.path().toStdString() + "/bad";
  fs::create_directories(base + "/adir.jsonl");
  auto fails = [&](const std::string& path, const std::string& what) {
    auto r = read_dataset_file(path);
    QVERIFY2(!r.ok(), path.c_str());
    QVERIFY2(contains(r.diagnostics, path + ": error: " + what), format_all(r.diagnostics).c_str());
  };
  fails(base + "/missing.jsonl", "no such file");
  fails(base + "/adir.jsonl", "is a directory; expected a .jsonl or .json file");
  fails(write("bad/data.csv", "a,b\n"), "unsupported file type '.csv'; Odyssey reads .jsonl");
  fails(write("bad/empty.jsonl", ""), "the file is empty");
  fails(write("bad/blank.jsonl", "\n  \n\t\n"), "the file is empty");
  fails(write("bad/garbage.jsonl", "hello\nworld\n"), "every record is malformed (2 lines, none a JSON object)");
  fails(write("bad/unknown.jsonl",
              "{\"prompt\": \"p\", \"completion\": \"c\"}\n{\"prompt\": \"q\", \"completion\": \"d\"}\n"),
        "unknown dataset format: the records have keys 'prompt', 'completion' (line 1); accepted formats: alpaca "
        "{instruction, input?, output, system?, history?}, sharegpt {conversations: [{from, value}], system?}, "
        "messages {messages: [{role, content}]}");
  fails(write("bad/novalid.jsonl", "{\"messages\": []}\n{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}]}\n"),
        "no valid samples: all 2 records are malformed");
  {
    auto r = read_dataset_file(base + "/novalid.jsonl");
    QVERIFY(contains(r.diagnostics, base + "/novalid.jsonl:1: error: messages: is empty"));
    QVERIFY(contains(r.diagnostics,
                     base + "/novalid.jsonl:2: error: messages[0].role: the conversation ends with a user turn"));
  }
  // Unreadable (only when the permission takes effect: not as root).
  const std::string locked = write("bad/locked.jsonl", messages_line("u", "a"));
  fs::permissions(locked, fs::perms::none);
  if (!std::ifstream(locked)) fails(locked, "cannot be opened");
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_write);
  // Through load_datasets: every file is reported, a bad spec too, and nothing is returned.
  const std::string good = write("bad/good.jsonl", messages_line("u", "a"));
  auto r = load_datasets({good, "missing.jsonl", "good.jsonl#0", "good.jsonl#x"}, LoadOptions{base, 0.01, 1, 10});
  QVERIFY(!r.ok());
  QVERIFY(r.value.samples.empty());
  QCOMPARE(r.value.files.size(), std::size_t{4});
  QVERIFY(contains(r.diagnostics, base + "/missing.jsonl: error: no such file"));
  QVERIFY(
      contains(r.diagnostics, "error: dataset: 'good.jsonl#0': the part after '#' must be a positive sample count"));
  QVERIFY(contains(r.diagnostics, "'good.jsonl#x'"));
  QVERIFY(!load_datasets({}).ok());

  // Garbage never crashes the reader: random bytes, JSON fragments, deep nesting.
  std::mt19937 rng(3);
  const std::vector<std::string> pieces = {"{",        "}",       "[",       "]",    "\"",        ":",    ",",
                                           "messages", "role",    "content", "user", "assistant", "null", "1e999",
                                           "\\u0000",  "\\ud800", "\xC3",    "\n",   " "};
  std::string junk;
  for (int line = 0; line < 300; ++line) {
    for (int k = 0, n = static_cast<int>(rng() % 30); k < n; ++k) {
      if (rng() % 4 == 0) junk += static_cast<char>(rng() % 256);
      else junk += pieces[rng() % pieces.size()];
    }
    junk += "\n";
  }
  junk += std::string(100000, '[') + "\n" + "{\"messages\": " + std::string(100000, '[') + "\n";
  for (const char* name : {"bad/junk.jsonl", "bad/junk.json"}) {
    const std::string p = write(name, name == std::string("bad/junk.json") ? "[" + junk : junk);
    auto j = read_dataset_file(p);
    QVERIFY(!j.ok());
    QVERIFY(contains(j.diagnostics, p + ":"));
  }
}

void TstDataset::sampling() {
  std::string text;
  for (int i = 0; i < 20; ++i) text += messages_line("q" + std::to_string(i), "a");
  write("sample/data.jsonl", text);
  const std::string base = tmp_.path().toStdString() + "/sample";
  auto picked = [&](const std::string& spec, std::uint64_t seed) {
    auto r = load_datasets({spec}, LoadOptions{base, 0.01, seed, 10});
    std::vector<std::string> users;
    for (const auto& s : r.value.samples) users.push_back(s.messages[0].content);
    return users;
  };
  const auto a = picked("data.jsonl#5", 7), b = picked("data.jsonl#5", 7), c = picked("data.jsonl#5", 8);
  QCOMPARE(a.size(), std::size_t{5});
  QCOMPARE(a, b);
  QVERIFY(a != c);
  QCOMPARE(std::set<std::string>(a.begin(), a.end()).size(), std::size_t{5});  // no repeats
  QCOMPARE(picked("data.jsonl", 7).size(), std::size_t{20});
  QCOMPARE(picked("data.jsonl", 7).front(), std::string("q0"));  // no #N: file order

  // N > available: every sample twice (in file order), then 5 drawn without repeats.
  auto r = load_datasets({"data.jsonl#45"}, LoadOptions{base, 0.01, 7, 10});
  QVERIFY(r.ok());
  QCOMPARE(r.value.samples.size(), std::size_t{45});
  QCOMPARE(r.value.files[0].selected, std::int64_t{45});
  QCOMPARE(r.value.files[0].requested, std::int64_t{45});
  QVERIFY(contains(r.diagnostics,
                   "warning: #45 asks for more samples than the file's 20: each sample is used 2 time(s) "
                   "and 5 more are drawn at random"));
  std::map<std::string, int> uses;
  for (std::size_t i = 0; i < r.value.samples.size(); ++i) {
    if (i < 40) QCOMPARE(r.value.samples[i].messages[0].content, "q" + std::to_string(i % 20));
    ++uses[r.value.samples[i].messages[0].content];
  }
  int thrice = 0;
  for (const auto& [k, n] : uses) {
    QVERIFY(n == 2 || n == 3);
    thrice += n == 3;
  }
  QCOMPARE(thrice, 5);
  // The generator is fixed: these values are the same on every platform.
  QCOMPARE(sample_indices(5, 3, 1), sample_indices(5, 3, 1));
  QCOMPARE(sample_indices(3, -1, 1), (std::vector<std::size_t>{0, 1, 2}));
  QCOMPARE(sample_indices(0, 4, 1), std::vector<std::size_t>{});
  const auto p = seeded_permutation(1000, 42);
  QCOMPARE(std::set<std::size_t>(p.begin(), p.end()).size(), std::size_t{1000});
  QVERIFY(p != seeded_permutation(1000, 43));
}

void TstDataset::mixing() {
  const std::string a = write("mix/a.jsonl", messages_line("a0", "x") + messages_line("a1", "x"));
  const std::string b = write("mix/b.json", json::array({{{"instruction", "b0"}, {"output", "y"}}}).dump());
  const std::string c =
      write("mix/c.jsonl", json({{"conversations", json::array({turn("human", "c0"), turn("gpt", "z")})}}).dump());
  auto r = load_datasets({"b.json", a, "c.jsonl", "a.jsonl#1"},
                         LoadOptions{tmp_.path().toStdString() + "/mix", 0.01, 3, 10});
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  std::vector<std::string> users;
  for (const auto& s : r.value.samples) users.push_back(s.messages[0].content);
  QCOMPARE(users.size(), std::size_t{5});
  QCOMPARE(users[0], std::string("b0"));
  QCOMPARE(users[1], std::string("a0"));
  QCOMPARE(users[2], std::string("a1"));
  QCOMPARE(users[3], std::string("c0"));
  QVERIFY(users[4] == "a0" || users[4] == "a1");
  QCOMPARE(r.value.files.size(), std::size_t{4});
  QCOMPARE(r.value.files[0].format, std::string("alpaca"));
  QCOMPARE(r.value.files[0].path, b);
  QCOMPARE(r.value.files[0].spec, std::string("b.json"));
  QCOMPARE(r.value.files[2].format, std::string("sharegpt"));
  QCOMPARE(r.value.files[3].selected, std::int64_t{1});
  QCOMPARE(r.value.files[3].samples, std::int64_t{2});
  QCOMPARE(r.value.samples[0].origin, b + ":[0]");
  QCOMPARE(r.value.samples[3].origin, c + ":1");
  auto again = load_datasets({"b.json", a, "c.jsonl", "a.jsonl#1"},
                             LoadOptions{tmp_.path().toStdString() + "/mix", 0.01, 3, 10});
  QCOMPARE(again.value.samples.size(), r.value.samples.size());
  for (std::size_t i = 0; i < r.value.samples.size(); ++i)
    QVERIFY(same_sample(again.value.samples[i], r.value.samples[i]));
  QVERIFY(!same_sample(r.value.samples[0], r.value.samples[1]));
}

void TstDataset::split() {
  const std::vector<std::pair<std::size_t, double>> cases = {{10, 0.1}, {10, 0.3},    {2, 0.01},
                                                             {2, 0.9},  {1000, 0.05}, {7, 0.5}};
  const std::vector<std::size_t> want = {1, 3, 1, 1, 50, 4};
  for (std::size_t k = 0; k < cases.size(); ++k) {
    std::vector<int> items(cases[k].first);
    std::iota(items.begin(), items.end(), 0);
    auto r = split_validation(items, cases[k].second, 42);
    QVERIFY(r.ok());
    QCOMPARE(r.value.val.size(), want[k]);
    QCOMPARE(r.value.train.size() + r.value.val.size(), items.size());
    QVERIFY(std::is_sorted(r.value.train.begin(), r.value.train.end()));
    QVERIFY(std::is_sorted(r.value.val.begin(), r.value.val.end()));
    auto again = split_validation(items, cases[k].second, 42);
    QCOMPARE(again.value.val, r.value.val);
  }
  std::vector<int> items(100);
  std::iota(items.begin(), items.end(), 0);
  QVERIFY(split_validation(items, 0.1, 1).value.val != split_validation(items, 0.1, 2).value.val);
  QCOMPARE(split_validation(items, 0.0, 1).value.train.size(), std::size_t{100});
  auto one = split_validation(std::vector<int>{1}, 0.1, 1);
  QVERIFY(!one.ok());
  QVERIFY(contains(one.diagnostics, "split_dataset_ratio: cannot hold out a validation share of 1 sample(s)"));
  QVERIFY(!split_validation(items, 1.0, 1).ok());
  // Samples themselves.
  std::vector<Sample> samples(5);
  for (std::size_t i = 0; i < samples.size(); ++i) samples[i].origin = "f:" + std::to_string(i + 1);
  auto s = split_validation(samples, 0.2, 9);
  QVERIFY(s.ok());
  QCOMPARE(s.value.val.size(), std::size_t{1});
  QCOMPARE(s.value.train.size(), std::size_t{4});
}

void TstDataset::labels() {
  const Tokenizer* qwen = tokenizer("qwen2_5");
  const Tokenizer* llama = tokenizer("llama3");
  const Tokenizer* qwen3 = tokenizer("qwen3");
  if (!qwen || !llama || !qwen3)
    QSKIP("needs ODYSSEY_PYTHON with the pinned transformers/tokenizers for the tokenizer fixtures");
  const std::vector<Sample> samples = {
      {{{"system", "Be brief.", {}},
        {"user", "Hi", {}},
        {"assistant", "Hello there!", {}},
        {"user", "Bye", {}},
        {"assistant", "Goodbye.", {}}},
       "f:1"},
      {{{"user", "What is 2 + 2?", {}}, {"assistant", "4", {}}}, "f:2"},
  };
  struct Case {
    const Tokenizer* tok;
    std::string name, family, end;
  };
  for (const Case& c : {Case{qwen, "auto", "qwen2", "<|im_end|>"}, Case{qwen, "qwen2_5", "", "<|im_end|>"},
                        Case{llama, "auto", "llama3", "<|eot_id|>"}, Case{llama, "llama3", "", "<|eot_id|>"}}) {
    auto tpl = template_for(c.name, *c.tok, c.family);
    QVERIFY2(tpl.ok(), format_all(tpl.diagnostics).c_str());
    auto r = tokenize_samples(samples, *c.tok, tpl.value, TokenizeOptions{});
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.value.samples.size(), std::size_t{2});
    const auto& s0 = r.value.samples[0];
    QCOMPARE(s0.origin, std::string("f:1"));
    QCOMPARE(s0.labels.size(), s0.ids.size());
    for (std::size_t i = 0; i < s0.ids.size(); ++i) QVERIFY(s0.labels[i] == kIgnoreIndex || s0.labels[i] == s0.ids[i]);
    const auto runs = label_runs(s0);
    QCOMPARE(runs.size(), std::size_t{2});
    QCOMPARE(c.tok->decode(runs[0]), "Hello there!" + c.end);
    QCOMPARE(c.tok->decode(runs[1]), "Goodbye." + c.end);
    // Not shifted: the token before the first label closes the assistant header.
    const auto first = static_cast<std::size_t>(
        std::find_if(s0.labels.begin(), s0.labels.end(), [](std::int32_t l) { return l != kIgnoreIndex; }) -
        s0.labels.begin());
    const std::string before = c.tok->decode(std::span<const std::int32_t>(s0.ids.data(), first));
    QVERIFY2(before.ends_with(c.end == "<|im_end|>" ? "<|im_start|>assistant\n"
                                                    : "<|start_header_id|>assistant<|end_header_id|>\n\n"),
             before.c_str());
    QCOMPARE(c.tok->decode(label_runs(r.value.samples[1])[0]), "4" + c.end);
    const auto& rep = r.value.report;
    QCOMPARE(rep.samples_in, std::int64_t{2});
    QCOMPARE(rep.kept, std::int64_t{2});
    QCOMPARE(rep.lengths.size(), std::size_t{2});
    QCOMPARE(rep.lengths[0], static_cast<std::int32_t>(s0.ids.size()));
    QCOMPARE(rep.total_tokens, static_cast<std::int64_t>(s0.ids.size() + r.value.samples[1].ids.size()));
    QCOMPARE(rep.label_tokens,
             static_cast<std::int64_t>(runs[0].size() + runs[1].size() + label_runs(r.value.samples[1])[0].size()));
    QVERIFY(summary(rep).find("2 samples (") != std::string::npos);
    // train_on_all: every token is a label.
    TokenizeOptions all;
    all.train_on_all = true;
    auto everything = tokenize_samples(samples, *c.tok, tpl.value, all);
    QCOMPARE(everything.value.samples[0].labels, everything.value.samples[0].ids);
  }
  // chatml is plain ChatML: no default system prompt and no think block (unlike qwen3).
  auto chatml = template_for("chatml", *qwen3, "");
  QVERIFY(chatml.ok());
  QCOMPARE(chatml.value.kind(), ChatTemplateKind::ChatML);
  auto r = tokenize_samples(samples, *qwen3, chatml.value, TokenizeOptions{});
  QVERIFY(r.ok());
  const auto runs = label_runs(r.value.samples[0]);
  QCOMPARE(runs.size(), std::size_t{2});
  QCOMPARE(qwen3->decode(runs[0]), std::string("Hello there!<|im_end|>"));
  QCOMPARE(qwen3->decode(runs[1]), std::string("Goodbye.<|im_end|>"));
  auto q3 = template_for("qwen3", *qwen3, "");
  QVERIFY(q3.ok());
  // Qwen3 renders the last reply with an empty think block; as ms-swift does by default
  // (ignore_empty_think) that block is not trained, the reply after it is.
  auto r3 = tokenize_samples(samples, *qwen3, q3.value, TokenizeOptions{});
  const auto runs3 = label_runs(r3.value.samples[0]);
  QCOMPARE(qwen3->decode(runs3[1]), std::string("Goodbye.<|im_end|>"));
  const std::string whole = qwen3->decode(r3.value.samples[0].ids);
  QVERIFY2(whole.find("<|im_start|>assistant\n<think>\n\n</think>\n\nGoodbye.") != std::string::npos, whole.c_str());
  TokenizeOptions keep;
  keep.ignore_empty_think = false;
  auto k3 = tokenize_samples(samples, *qwen3, q3.value, keep);
  QCOMPARE(qwen3->decode(label_runs(k3.value.samples[0])[1]), std::string("<think>\n\n</think>\n\nGoodbye.<|im_end|>"));
  // A reply that thinks keeps its think block trained.
  const std::vector<Sample> thinking = {
      {{{"user", "2+2?", {}}, {"assistant", "<think>\nadd them\n</think>\n\n4", {}}}, "f:3"}};
  auto t3 = tokenize_samples(thinking, *qwen3, q3.value, TokenizeOptions{});
  QVERIFY2(t3.ok(), format_all(t3.diagnostics).c_str());
  QCOMPARE(qwen3->decode(label_runs(t3.value.samples[0]).back()),
           std::string("<think>\nadd them\n</think>\n\n4<|im_end|>"));
  const std::string text = qwen3->decode(r.value.samples[1].ids);
  QVERIFY(text.starts_with("<|im_start|>user\n"));  // no default system prompt
}

void TstDataset::defaultSystem() {
  const Tokenizer* qwen = tokenizer("qwen2_5");
  if (!qwen) QSKIP("needs the tokenizer fixtures (ODYSSEY_PYTHON)");
  const ChatTemplate tpl(ChatTemplateKind::Qwen2_5);
  const std::vector<Sample> samples = {{{{"user", "u", {}}, {"assistant", "a", {}}}, "f:1"},
                                       {{{"system", "Own.", {}}, {"user", "u", {}}, {"assistant", "a", {}}}, "f:2"}};
  TokenizeOptions o;
  auto plain = tokenize_samples(samples, *qwen, tpl, o);
  QVERIFY(qwen->decode(plain.value.samples[0].ids)
              .starts_with("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud."));
  o.system = "Answer briefly.";
  auto with = tokenize_samples(samples, *qwen, tpl, o);
  QVERIFY(with.ok());
  QVERIFY(qwen->decode(with.value.samples[0].ids)
              .starts_with("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nu"));
  QVERIFY(qwen->decode(with.value.samples[1].ids).starts_with("<|im_start|>system\nOwn.<|im_end|>"));
}

void TstDataset::truncation() {
  const Tokenizer* qwen = tokenizer("qwen2_5");
  if (!qwen) QSKIP("needs the tokenizer fixtures (ODYSSEY_PYTHON)");
  const ChatTemplate tpl(ChatTemplateKind::Qwen2_5);
  std::string long_text;
  for (int i = 0; i < 150; ++i) long_text += "word" + std::to_string(i) + " ";
  const std::vector<Sample> samples = {
      {{{"user", "Hi", {}}, {"assistant", "Hello", {}}}, "f:1"},       // short
      {{{"user", long_text, {}}, {"assistant", "Done.", {}}}, "f:2"},  // long question
      {{{"user", "Q", {}}, {"assistant", long_text, {}}}, "f:3"},      // long answer
  };
  TokenizeOptions o;
  std::vector<TokenizedSample> full;
  for (const auto& s : samples) full.push_back(tokenize_sample(s, *qwen, tpl, o).value);
  const auto max = static_cast<std::int64_t>(full[0].ids.size()) + 6;
  QVERIFY(static_cast<std::int64_t>(full[1].ids.size()) > max + 20);
  QVERIFY(static_cast<std::int64_t>(full[2].ids.size()) > max + 20);
  o.max_length = max;

  o.truncation = Truncation::Delete;
  auto r = tokenize_samples(samples, *qwen, tpl, o);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.report.kept, std::int64_t{1});
  QCOMPARE(r.value.report.dropped_too_long, std::int64_t{2});
  QCOMPARE(r.value.report.truncated, std::int64_t{0});
  QCOMPARE(r.value.samples[0], full[0]);
  QVERIFY(contains(r.diagnostics, "warning: max_length: dropped 2 samples longer than max_length " +
                                      std::to_string(max) + " (truncation_strategy delete); the first: f:2 has " +
                                      std::to_string(full[1].ids.size()) + " tokens"));

  o.truncation = Truncation::Left;
  r = tokenize_samples(samples, *qwen, tpl, o);
  QVERIFY(r.ok());
  QCOMPARE(r.value.report.kept, std::int64_t{3});
  QCOMPARE(r.value.report.truncated, std::int64_t{2});
  for (std::size_t k = 1; k < 3; ++k) {
    const auto& s = r.value.samples[k];
    QCOMPARE(static_cast<std::int64_t>(s.ids.size()), max);
    QVERIFY(std::equal(s.ids.begin(), s.ids.end(), full[k].ids.end() - max));
    QVERIFY(std::equal(s.labels.begin(), s.labels.end(), full[k].labels.end() - max));
  }
  QCOMPARE(r.value.report.lengths,
           (std::vector<std::int32_t>{static_cast<std::int32_t>(full[0].ids.size()), static_cast<std::int32_t>(max),
                                      static_cast<std::int32_t>(max)}));

  o.truncation = Truncation::Right;
  r = tokenize_samples(samples, *qwen, tpl, o);
  QVERIFY(r.ok());
  QCOMPARE(r.value.report.kept, std::int64_t{2});
  QCOMPARE(r.value.report.truncated, std::int64_t{1});
  QCOMPARE(r.value.report.dropped_no_labels, std::int64_t{1});  // the long question leaves no answer token
  QCOMPARE(r.value.samples[1].origin, std::string("f:3"));
  QVERIFY(std::equal(r.value.samples[1].ids.begin(), r.value.samples[1].ids.end(), full[2].ids.begin()));
  QVERIFY(contains(r.diagnostics,
                   "dropped 1 sample with no token to train on (no assistant token left after right "
                   "truncation); the first: f:2"));

  o.truncation = Truncation::Raise;
  r = tokenize_samples(samples, *qwen, tpl, o);
  QVERIFY(!r.ok());
  QVERIFY(r.value.samples.empty());
  QVERIFY2(contains(r.diagnostics, "error: truncation_strategy: f:2 has " + std::to_string(full[1].ids.size()) +
                                       " tokens, more than max_length " + std::to_string(max)),
           format_all(r.diagnostics).c_str());

  // Everything dropped is an error; a bad max_length too.
  o.truncation = Truncation::Delete;
  o.max_length = 3;
  QVERIFY(contains(tokenize_samples(samples, *qwen, tpl, o).diagnostics, "error: no sample is left to train on"));
  o.max_length = 0;
  QVERIFY(contains(tokenize_samples(samples, *qwen, tpl, o).diagnostics, "error: max_length: found 0"));
  QCOMPARE(parse_truncation("left"), std::optional<Truncation>(Truncation::Left));
  QVERIFY(!parse_truncation("middle"));
}

void TstDataset::templates() {
  const Tokenizer* qwen = tokenizer("qwen2_5");
  const Tokenizer* gpt2 = tokenizer("gpt2");
  const Tokenizer* l31 = tokenizer("llama3_1");
  if (!qwen || !gpt2 || !l31) QSKIP("needs the tokenizer fixtures (ODYSSEY_PYTHON)");
  QCOMPARE(template_for("auto", *qwen, "qwen2").value.kind(), ChatTemplateKind::Qwen2_5);
  QCOMPARE(template_for("auto", *l31, "llama3").value.kind(), ChatTemplateKind::Llama3_1);
  QCOMPARE(template_for("qwen3", *qwen, "").value.kind(), ChatTemplateKind::Qwen3);
  QCOMPARE(template_for("llama3_1", *l31, "").value.kind(), ChatTemplateKind::Llama3_1);
  auto r = template_for("mistral", *qwen, "");
  QVERIFY(!r.ok());
  QVERIFY(contains(r.diagnostics,
                   "error: template: found 'mistral'; expected auto, chatml, qwen2_5, qwen3, llama3 or llama3_1"));
  // A template whose special tokens the tokenizer lacks is refused (they would be split into pieces).
  r = template_for("chatml", *gpt2, "");
  QVERIFY(!r.ok());
  QVERIFY(
      contains(r.diagnostics, "tokenizer.json: error: template: the chatml template needs the token '<|im_start|>'"));
  r = template_for("llama3", *qwen, "");
  QVERIFY(!r.ok());
  QVERIFY(contains(r.diagnostics, "needs the token '<|start_header_id|>'"));
  // An explicit template other than the model's own works, with a warning.
  r = template_for("llama3", *l31, "");
  QVERIFY(r.ok());
  QVERIFY(
      contains(r.diagnostics, "warning: template: the model's own chat template is llama3_1; training with llama3"));
  QVERIFY(!template_for("auto", *gpt2, "gpt2").ok());
}

void TstDataset::parallelDeterminism() {
  const Tokenizer* qwen = tokenizer("qwen2_5");
  if (!qwen) QSKIP("needs the tokenizer fixtures (ODYSSEY_PYTHON)");
  std::vector<Sample> samples;
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    std::string q, a;
    for (int k = 0, n = static_cast<int>(rng() % 40); k < n; ++k) q += "w" + std::to_string(rng() % 100) + " ";
    for (int k = 0, n = 1 + static_cast<int>(rng() % 30); k < n; ++k) a += "v" + std::to_string(rng() % 100) + " ";
    samples.push_back({{{"user", q, {}}, {"assistant", a, {}}}, "f:" + std::to_string(i + 1)});
  }
  TokenizeOptions o;
  o.max_length = 200;
  o.threads = 1;
  auto one = tokenize_samples(samples, *qwen, ChatTemplate(ChatTemplateKind::Qwen2_5), o);
  o.threads = 4;
  auto four = tokenize_samples(samples, *qwen, ChatTemplate(ChatTemplateKind::Qwen2_5), o);
  QVERIFY2(one.ok(), format_all(one.diagnostics).c_str());
  QVERIFY2(four.ok(), format_all(four.diagnostics).c_str());
  QVERIFY(one.value.report.dropped_too_long > 0);
  QVERIFY(one.value.report.kept > 100);
  QCOMPARE(four.value.report, one.value.report);
  QCOMPARE(four.value.samples, one.value.samples);
  QCOMPARE(format_all(four.diagnostics), format_all(one.diagnostics));
}

void TstDataset::packing() {
  const std::vector<std::int32_t> lengths = {5, 3, 8, 2, 7, 1};
  const auto bins = pack_bins(lengths, 10);
  // Decreasing: 8(2) 7(4) 5(0) 3(1) 2(3) 1(5); each into the first bin with room.
  QCOMPARE(bins, (std::vector<std::vector<std::size_t>>{{2, 3}, {4, 1}, {0, 5}}));
  const auto rep = packing_report(lengths, bins, 10);
  QCOMPARE(rep.bins, std::size_t{3});
  QCOMPARE(rep.tokens, std::int64_t{26});
  QCOMPARE(rep.samples, std::size_t{6});
  QCOMPARE(rep.efficiency, 26.0 / 30.0);
  // Ties by index; a sample over capacity gets its own bin.
  QCOMPARE(pack_bins(std::vector<std::int32_t>{4, 4, 4}, 8), (std::vector<std::vector<std::size_t>>{{0, 1}, {2}}));
  QCOMPARE(pack_bins(std::vector<std::int32_t>{12, 3, 3}, 10), (std::vector<std::vector<std::size_t>>{{0}, {1, 2}}));
  QVERIFY(pack_bins(std::vector<std::int32_t>{}, 10).empty());
  // Random: every sample exactly once, no bin over capacity, deterministic.
  std::mt19937 rng(11);
  std::vector<std::int32_t> many(5000);
  for (auto& x : many) x = 1 + static_cast<std::int32_t>(rng() % 2048);
  const auto b = pack_bins(many, 2048);
  QCOMPARE(pack_bins(many, 2048), b);
  std::vector<int> seen(many.size(), 0);
  for (const auto& bin : b) {
    std::int64_t used = 0;
    for (std::size_t i : bin) {
      ++seen[i];
      used += many[i];
    }
    QVERIFY(used <= 2048);
  }
  QVERIFY(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  QVERIFY(packing_report(many, b, 2048).efficiency > 0.9);
}

void TstDataset::rows() {
  const TokenizedSample a{{10, 11, 12}, {-100, 11, 12}, "a"};
  const TokenizedSample b{{20, 21}, {20, 21}, "b"};
  const TokenizedSample c{{30, 31, 32, 33}, {-100, -100, 32, 33}, "c"};
  const Row row = make_row({&a, &b, &c});
  QCOMPARE(row.input_ids, (std::vector<std::int32_t>{10, 11, 12, 20, 21, 30, 31, 32, 33}));
  QCOMPARE(row.labels, (std::vector<std::int32_t>{-100, 11, 12, -100, 21, -100, -100, 32, 33}));
  QCOMPARE(row.position_ids, (std::vector<std::int32_t>{0, 1, 2, 0, 1, 0, 1, 2, 3}));
  QCOMPARE(row.cu_seqlens, (std::vector<std::int32_t>{0, 3, 5, 9}));
  QCOMPARE(row.max_seqlen, 4);
  const Row empty = make_row({});
  QCOMPARE(empty.cu_seqlens, std::vector<std::int32_t>{0});
  QCOMPARE(empty.max_seqlen, 0);
  QVERIFY(empty.input_ids.empty());
  const TokenizedSample none{{}, {}, "none"};
  QCOMPARE(make_row({&a, nullptr, &none}).cu_seqlens, (std::vector<std::int32_t>{0, 3}));
}

void TstDataset::sha256() {
  QCOMPARE(sha256_hex(""), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  QCOMPARE(sha256_hex("abc"), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  QCOMPARE(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
           std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  Sha256 h;  // a million 'a's in uneven pieces
  const std::string chunk(997, 'a');
  std::size_t left = 1000000;
  while (left) {
    const std::size_t n = std::min(left, chunk.size());
    h.update(chunk.data(), n);
    left -= n;
  }
  QCOMPARE(Sha256::hex(h.digest()), std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

void TstDataset::cache() {
  const Tokenizer* qwen = tokenizer("qwen2_5");
  if (!qwen) QSKIP("needs the tokenizer fixtures (ODYSSEY_PYTHON)");
  std::string text;
  for (int i = 0; i < 30; ++i) text += messages_line("question " + std::to_string(i), "answer " + std::to_string(i));
  text += "broken line\n";
  const std::string data = write("cache/data/train.jsonl", text);
  const std::string cache_dir = tmp_.path().toStdString() + "/cache/store";
  LoadOptions lo{tmp_.path().toStdString() + "/cache/data", 0.1, 42, 10};
  const ChatTemplate tpl(ChatTemplateKind::Qwen2_5);
  TokenizeOptions to;
  to.max_length = 100;
  const TokenCacheOptions co{true, cache_dir};
  const std::vector<std::string> specs = {"train.jsonl#20"};

  auto first = load_tokenized(specs, lo, *qwen, tpl, to, co);
  QVERIFY2(first.ok(), format_all(first.diagnostics).c_str());
  QVERIFY(!first.value.from_cache);
  QVERIFY(fs::exists(first.value.cache_file));
  QCOMPARE(first.value.cache_key.size(), std::size_t{64});
  QCOMPARE(first.value.samples.size(), std::size_t{20});
  QVERIFY(contains(first.diagnostics, data + ":31:1: warning: not valid JSON"));
  auto second = load_tokenized(specs, lo, *qwen, tpl, to, co);
  QVERIFY2(second.ok(), format_all(second.diagnostics).c_str());
  QVERIFY(second.value.from_cache);
  QCOMPARE(second.value.cache_file, first.value.cache_file);
  QCOMPARE(second.value.samples, first.value.samples);
  QCOMPARE(second.value.report, first.value.report);
  QCOMPARE(second.value.files.size(), first.value.files.size());
  QCOMPARE(summary(second.value.files[0]), summary(first.value.files[0]));
  QVERIFY(contains(second.diagnostics, data + ":31:1: warning: not valid JSON"));  // the same warnings
  QVERIFY(contains(second.diagnostics, first.value.cache_file + ": note: tokenized data read from the cache"));
  // The stored samples are those a run without the cache makes.
  auto uncached = load_tokenized(specs, lo, *qwen, tpl, to, TokenCacheOptions{false, {}});
  QCOMPARE(uncached.value.samples, first.value.samples);
  QVERIFY(uncached.value.cache_file.empty());

  // Every input of the key changes it.
  TokenCacheKeyInputs in;
  in.specs = specs;
  in.base_dir = lo.base_dir;
  in.seed = 42;
  in.max_bad_sample_ratio = 0.1;
  in.tokenizer_file = qwen->file();
  in.bos_token = qwen->bos_token();
  in.template_name = "qwen2_5";
  in.tokenize = to;
  const auto key = token_cache_key(in);
  QVERIFY(key.ok());
  QCOMPARE(key.value, first.value.cache_key);
  std::set<std::string> keys = {key.value};
  auto differs = [&](TokenCacheKeyInputs x) {
    auto k = token_cache_key(x);
    QVERIFY2(k.ok(), format_all(k.diagnostics).c_str());
    QVERIFY(keys.insert(k.value).second);
  };
  auto x = in;
  x.specs = {"train.jsonl#21"};
  differs(x);
  x = in;
  x.specs = {"train.jsonl"};
  differs(x);
  x = in;
  x.seed = 43;
  differs(x);
  x = in;
  x.max_bad_sample_ratio = 0.2;
  differs(x);
  x = in;
  x.template_name = "qwen3";
  differs(x);
  x = in;
  x.tokenize.system = "S";
  differs(x);
  x = in;
  x.tokenize.max_length = 65;
  differs(x);
  x = in;
  x.tokenize.truncation = Truncation::Left;
  differs(x);
  x = in;
  x.tokenize.train_on_all = true;
  differs(x);
  x = in;
  x.bos_token = "<s>";
  differs(x);
  // Another tokenizer.json (same directory contents, one byte more).
  const std::string tokdir = tmp_.path().toStdString() + "/cache/tok";
  fs::create_directories(tokdir);
  fs::copy_file(qwen->file(), tokdir + "/tokenizer.json");
  { std::ofstream(tokdir + "/tokenizer.json", std::ios::app) << "\n"; }
  x = in;
  x.tokenizer_file = tokdir + "/tokenizer.json";
  differs(x);
  // The data file's bytes (same size, one character changed), end to end.
  std::string changed = text;
  changed[changed.find("answer 7")] = 'A';
  write_bytes(data, changed);
  differs(in);
  auto third = load_tokenized(specs, lo, *qwen, tpl, to, co);
  QVERIFY(third.ok());
  QVERIFY(!third.value.from_cache);
  QVERIFY(third.value.cache_file != first.value.cache_file);
  auto template_changed = load_tokenized(specs, lo, *qwen, ChatTemplate(ChatTemplateKind::Qwen3), to, co);
  QVERIFY(!template_changed.value.from_cache);
  // Unreadable inputs: no key (the loader reports the file itself).
  x = in;
  x.specs = {"nope.jsonl"};
  QVERIFY(!token_cache_key(x).ok());
  auto missing = load_tokenized({"nope.jsonl"}, lo, *qwen, tpl, to, co);
  QVERIFY(!missing.ok());
  QVERIFY(contains(missing.diagnostics, "nope.jsonl: error: no such file"));
  QVERIFY(!default_token_cache_dir().empty());
}

void TstDataset::damagedCache() {
  const Tokenizer* qwen = tokenizer("qwen2_5");
  if (!qwen) QSKIP("needs the tokenizer fixtures (ODYSSEY_PYTHON)");
  std::string text;
  for (int i = 0; i < 6; ++i) text += messages_line("q" + std::to_string(i), "a" + std::to_string(i));
  write("damaged/train.jsonl", text);
  const std::string cache_dir = tmp_.path().toStdString() + "/damaged/store";
  const LoadOptions lo{tmp_.path().toStdString() + "/damaged", 0.01, 42, 10};
  const ChatTemplate tpl(ChatTemplateKind::Qwen2_5);
  const TokenizeOptions to;
  const TokenCacheOptions co{true, cache_dir};
  auto good = load_tokenized({"train.jsonl"}, lo, *qwen, tpl, to, co);
  QVERIFY(good.ok());
  const std::string file = good.value.cache_file;
  const std::string key = good.value.cache_key;
  const std::string bytes = read_bytes(file);
  QVERIFY(bytes.size() > 200);

  // A flipped byte: warned about, rebuilt, and the rebuilt file hits again.
  std::string flipped = bytes;
  flipped[bytes.size() / 2] = static_cast<char>(flipped[bytes.size() / 2] ^ 0x20);
  write_bytes(file, flipped);
  auto r = load_tokenized({"train.jsonl"}, lo, *qwen, tpl, to, co);
  QVERIFY(r.ok());
  QVERIFY(!r.value.from_cache);
  QVERIFY2(contains(r.diagnostics, file + ": warning: token cache ignored and rebuilt: checksum mismatch"),
           format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.samples, good.value.samples);
  QCOMPARE(read_bytes(file), bytes);
  QVERIFY(load_tokenized({"train.jsonl"}, lo, *qwen, tpl, to, co).value.from_cache);
  // Truncated.
  write_bytes(file, bytes.substr(0, bytes.size() - 40));
  r = load_tokenized({"train.jsonl"}, lo, *qwen, tpl, to, co);
  QVERIFY(!r.value.from_cache);
  QVERIFY2(contains(r.diagnostics, file + ": warning: token cache ignored and rebuilt:"),
           format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.samples, good.value.samples);
  // Foreign files.
  write_bytes(file, std::string(500, 'x'));
  QVERIFY(contains(read_token_cache(file, key).diagnostics, "not an Odyssey token cache file"));
  write_bytes(file, "tiny");
  QVERIFY(contains(read_token_cache(file, key).diagnostics, "truncated (4 bytes)"));
  std::string other_version = bytes;
  other_version[8] = 9;
  write_bytes(file, other_version);
  QVERIFY(contains(read_token_cache(file, key).diagnostics, "written in cache format 9, this build reads format 1"));
  write_bytes(file, bytes);
  QVERIFY(contains(read_token_cache(file, std::string(64, '0')).diagnostics, "it belongs to another key"));
  QVERIFY(read_token_cache(file, key).value.has_value());
  QVERIFY(!read_token_cache(file + ".absent", key).value.has_value());
  QVERIFY(read_token_cache(file + ".absent", key).diagnostics.empty());

  // Every single-byte change and every truncation is caught (never trusted, never a crash).
  qInfo("cache file of %zu bytes", bytes.size());
  for (std::size_t i = 0; i < bytes.size(); i += i < 160 || i + 40 > bytes.size() ? 1 : 11) {  // header, trailer: all
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ (i % 2 ? 0x01 : 0x80));
    write_bytes(file, b);
    auto c = read_token_cache(file, key);
    QVERIFY2(!c.value.has_value() && count_of(c.diagnostics, Severity::Warning) == 1, std::to_string(i).c_str());
  }
  for (std::size_t n = 0; n < bytes.size(); n += 23) {
    write_bytes(file, bytes.substr(0, n));
    auto c = read_token_cache(file, key);
    QVERIFY2(!c.value.has_value() && count_of(c.diagnostics, Severity::Warning) == 1, std::to_string(n).c_str());
  }
  write_bytes(file, bytes + "extra");
  QVERIFY(!read_token_cache(file, key).value.has_value());
  // No temporary files are left behind.
  for (const auto& e : fs::directory_iterator(cache_dir))
    QVERIFY2(e.path().extension() == ".odtok", e.path().string().c_str());
}

// Issue 21 item 10: one malformed 100 MB line was copied whole into its warning (stdout,
// events.jsonl, the rank log). A 4 MB line proves the cut: the warning quotes ~200 bytes
// of it and names the length, and stays under the diagnostic cap however it is formatted.
void TstDataset::longMalformedLineIsCut() {
  std::string text;
  for (int i = 0; i < 300; ++i) text += messages_line("q" + std::to_string(i), "a" + std::to_string(i));
  // nlohmann quotes the token it stopped at: here the whole unterminated 4 MiB string.
  const std::string token = "{\"messages\": \"" + std::string(4u << 20, 'x') + "\n";
  const std::string key = "{\"" + std::string(4u << 20, 'k') + "\": 1}\n";  // a record of no known format
  const std::string path = write("long/train.jsonl", text + token + key);
  auto r = read_dataset_file(path);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.report.malformed, std::int64_t(2));
  const std::string all = format_all(r.diagnostics);
  QVERIFY2(all.size() < 2000, std::to_string(all.size()).c_str());
  QVERIFY2(all.find(path + ":302:") != std::string::npos && all.find(path + ":301:") != std::string::npos, all.c_str());
  QVERIFY2(all.find("bytes in all)") != std::string::npos, all.c_str());
  for (const auto& d : r.diagnostics) QVERIFY(d.format().size() < 1000);
}

// Issue 21 item 3: #2000000 of a small file took 2.5 GB; #10^12 ended in std::bad_alloc at
// step 1 naming no key. Both are refused when the data is loaded, naming the argument, the
// file's count and the limit; count_dataset_records counts without converting.
void TstDataset::sampleCountBounds() {
  std::string text;
  for (int i = 0; i < 20; ++i) text += alpaca("q" + std::to_string(i), "a" + std::to_string(i)) + "\n\n";
  const std::string path = write("bounds/train.jsonl", text);
  const LoadOptions lo{tmp_.path().toStdString() + "/bounds", 0.01, 42, 10};
  auto r = load_datasets({"train.jsonl#2000000"}, lo);
  QVERIFY(!r.ok());
  QVERIFY2(contains(r.diagnostics, path + ": error: dataset: 'train.jsonl#2000000': #2000000 would use each of the "
                                          "file's 20 records more than 100 times; ask for at most 2000"),
           format_all(r.diagnostics).c_str());
  QVERIFY(r.value.samples.empty());
  r = load_datasets({"train.jsonl#1000000000000"}, lo);
  QVERIFY2(contains(r.diagnostics, "asks for more than 10000000 samples"), format_all(r.diagnostics).c_str());
  r = load_datasets({"train.jsonl#2000"}, lo);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.samples.size(), std::size_t(2000));
  auto n = count_dataset_records(path);
  QVERIFY(n.ok());
  QCOMPARE(n.value, std::int64_t(20));
  const std::string arr =
      write("bounds/train.json", "[{\"instruction\": \"a\", \"output\": [1, {\"x\": []}]}, 2, \"s\", null]");
  n = count_dataset_records(arr);
  QVERIFY2(n.ok(), format_all(n.diagnostics).c_str());
  QCOMPARE(n.value, std::int64_t(4));
  QVERIFY(!count_dataset_records(write("bounds/broken.json", "[{\"a\": 1},")).ok());
}

// Issue 21 item 5: a dataset that is a FIFO is refused, not waited on (the token-cache key
// hashed it first, with a blocking open).
void TstDataset::fifoDatasetIsRefused() {
  const std::string path = tmp_.path().toStdString() + "/fifo.jsonl";
  QCOMPARE(::mkfifo(path.c_str(), 0600), 0);
  auto within = [&](auto f) {
    auto fut = std::async(std::launch::async, f);
    const bool in_time = fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    if (!in_time) {  // release the blocked reader so that the test fails instead of hanging
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    auto v = fut.get();
    if (!in_time) qWarning("blocked on the FIFO");
    return std::pair{in_time, v};
  };
  auto [t1, r] = within([&] { return read_dataset_file(path); });
  QVERIFY(t1);
  QVERIFY2(contains(r.diagnostics, path + ": error: is a FIFO (named pipe), not a regular file"),
           format_all(r.diagnostics).c_str());
  auto [t2, n] = within([&] { return count_dataset_records(path); });
  QVERIFY(t2);
  QVERIFY(!n.ok());
  auto [t3, h] = within([&] {
    std::string error;
    return std::pair{sha256_file(path, &error).has_value(), error};
  });
  QVERIFY(t3);
  QVERIFY2(!h.first && h.second.find("is a FIFO") != std::string::npos, h.second.c_str());
}

// Issue 21 item 11: a forged token-cache entry (ids beyond the vocabulary, checksum made to
// match) failed every run at step 1 with "index out of range in self" until --no-token-cache.
// It is now discarded with a warning naming the cache file and rebuilt. The tokenizer is the
// quickstart model's (1024 ids).
void TstDataset::forgedCacheIdsAreRebuilt() {
  auto tok = Tokenizer::load(ODYSSEY_SOURCE_DIR "/resources/quickstart/model");
  QVERIFY2(tok.ok(), format_all(tok.diagnostics).c_str());
  std::string text;
  for (int i = 0; i < 5; ++i) text += messages_line("q" + std::to_string(i), "a" + std::to_string(i));
  write("forged/train.jsonl", text);
  const LoadOptions lo{tmp_.path().toStdString() + "/forged", 0.01, 42, 10};
  const ChatTemplate tpl(ChatTemplateKind::Qwen2_5);
  const TokenizeOptions to;
  const TokenCacheOptions co{true, tmp_.path().toStdString() + "/forged/store"};
  auto good = load_tokenized({"train.jsonl"}, lo, tok.value, tpl, to, co);
  QVERIFY2(good.ok() && !good.value.cache_file.empty(), format_all(good.diagnostics).c_str());
  const std::string file = good.value.cache_file;

  // The forger's edit: sample 0's first id becomes 999999 (its label too when it is trained),
  // and the trailing SHA-256 is recomputed so that the file verifies.
  std::string b = read_bytes(file);
  auto u32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(k)]);
    return v;
  };
  auto put32 = [&](std::size_t at, std::int32_t v) {
    for (int k = 0; k < 4; ++k)
      b[at + static_cast<std::size_t>(k)] = static_cast<char>((static_cast<std::uint32_t>(v) >> (8 * k)) & 0xFF);
  };
  const std::size_t header = 8 + 4 + 64 + 8 + 8 + 8;
  const std::size_t meta = u32(header - 8);  // meta_size (low 32 bits suffice here)
  const std::size_t sample = header + meta;
  const std::size_t origin_len = u32(sample), n = u32(sample + 4);
  const std::size_t ids = sample + 8 + origin_len, labels = ids + 4 * n;
  const bool trained = static_cast<std::int32_t>(u32(labels)) != kIgnoreIndex;
  put32(ids, 999999);
  if (trained) put32(labels, 999999);
  Sha256 h;
  h.update(b.data(), b.size() - 32);
  const auto digest = h.digest();
  std::copy(digest.begin(), digest.end(), b.end() - 32);
  write_bytes(file, b);
  QVERIFY(read_token_cache(file, good.value.cache_key).value.has_value());  // it verifies: only the ids betray it

  auto r = load_tokenized({"train.jsonl"}, lo, tok.value, tpl, to, co);
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QVERIFY(!r.value.from_cache);
  QVERIFY2(contains(r.diagnostics, file + ": warning: token cache ignored and rebuilt: sample 0 (") &&
               contains(r.diagnostics, "holds token id 999999, outside the tokenizer's 1024 ids"),
           format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.samples, good.value.samples);
  auto again = load_tokenized({"train.jsonl"}, lo, tok.value, tpl, to, co);  // rebuilt: a hit again
  QVERIFY(again.value.from_cache);
  QCOMPARE(again.value.samples, good.value.samples);
}

// Function calling in the three forms datasets carry it: transformers' messages (tool_calls,
// role tool), ms-swift's agent roles (tool_call, tool_response; tools as a JSON string) and
// LLaMA-Factory's sharegpt (function_call, observation). All three give the same conversation.
void TstDataset::toolConversations() {
  const std::string tools =
      R"([{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])";
  const std::string hf = R"({"tools": )" + tools + R"(, "messages": [{"role": "user", "content": "Time?"},
    {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": {"tz": "UTC", "a": 1}}}]},
    {"role": "tool", "name": "get_time", "content": "13:05"}, {"role": "assistant", "content": "13:05."}]})";
  std::string swift_tools = tools;
  for (std::size_t k = 0; (k = swift_tools.find('"', k)) != std::string::npos; k += 2) swift_tools.insert(k, "\\");
  const std::string swift = R"({"tools": ")" + swift_tools + R"(", "messages": [{"role": "user", "content": "Time?"},
    {"role": "tool_call", "content": "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\", \"a\": 1}}"},
    {"role": "tool_response", "content": "13:05"}, {"role": "assistant", "content": "13:05."}]})";
  const std::string sharegpt = R"({"tools": )" + tools + R"(, "conversations": [{"from": "human", "value": "Time?"},
    {"from": "function_call", "value": "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\", \"a\": 1}}"},
    {"from": "observation", "value": "13:05"}, {"from": "gpt", "value": "13:05."}]})";
  std::vector<Sample> got;
  for (const auto& [name, line] : {std::pair{"hf", hf}, std::pair{"swift", swift}, std::pair{"sharegpt", sharegpt}}) {
    std::string one_line = line;
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    auto r = read_dataset_file(write(std::string("tools/") + name + ".jsonl", one_line + "\n"));
    QVERIFY2(r.ok() && r.value.samples.size() == 1, (std::string(name) + ": " + format_all(r.diagnostics)).c_str());
    got.push_back(r.value.samples[0]);
  }
  const Sample& s = got[0];
  QCOMPARE(s.messages.size(), std::size_t{4});
  QCOMPARE(s.messages[1].role, std::string("assistant"));
  // Key order as written (tojson writes it so), the call wrapped in the function form.
  QCOMPARE(s.messages[1].tool_calls,
           std::string(R"([{"type":"function","function":{"name":"get_time","arguments":{"tz":"UTC","a":1}}}])"));
  QCOMPARE(s.messages[1].content_form, ChatMessage::Form::Absent);
  QCOMPARE(s.messages[2].role, std::string("tool"));
  QCOMPARE(s.messages[2].name, std::string("get_time"));
  QVERIFY(s.tools.find("\"name\":\"get_time\"") != std::string::npos);
  for (std::size_t k = 1; k < got.size(); ++k) {
    QCOMPARE(got[k].tools, s.tools);
    QCOMPARE(got[k].messages.size(), s.messages.size());
    QCOMPARE(got[k].messages[1].tool_calls, s.messages[1].tool_calls);
    QCOMPARE(got[k].messages[2].role, std::string("tool"));
    QCOMPARE(got[k].messages[2].content, std::string("13:05"));
  }

  // Order and shape errors name the record's key.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f"}}]}, {"role": "assistant", "content": "a"}]})",
       "messages[2].role: expected the result of the tool calls of messages[1] (a tool turn) here, found an assistant "
       "turn"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]}, {"role": "tool", "content": "r"}]})",
       "messages[2].role: the conversation ends with a tool result"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {}}}]}]})",
       "messages[1].tool_calls[0].function.name: expected the called function's name"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": {"name": "f"}}]})",
       "messages[1].tool_calls: expected an array of tool calls, found object"},
      {R"({"tools": "not json", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})",
       "tools: is a string but not valid JSON"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "tool_call", "content": "{broken"}]})",
       "messages[1].content: a tool_call's content must be the JSON of the call"},
  };
  std::string file;
  for (const auto& [line, _] : bad) file += line + "\n";
  file += R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"
          "\n";
  const std::string path = write("tools/bad.jsonl", file);
  LoadOptions o;
  o.max_bad_sample_ratio = 1.0;
  auto r = read_dataset_file(path, o);
  QVERIFY(r.ok());
  QCOMPARE(r.value.samples.size(), std::size_t{1});
  for (std::size_t k = 0; k < bad.size(); ++k)
    QVERIFY2(contains(r.diagnostics, path + ":" + std::to_string(k + 1) + ": warning: " + bad[k].second),
             format_all(r.diagnostics).c_str());
}

QTEST_APPLESS_MAIN(TstDataset)
#include "tst_dataset.moc"
