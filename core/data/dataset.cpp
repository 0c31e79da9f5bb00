#include "data/dataset.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/regular_file.h"
#include "common/json_dump.h"
#include "common/text.h"
#include "config/train_config.h"
#include "tokenizer/utf8.h"

namespace odyssey::data {

namespace {

namespace fs = std::filesystem;
// Ordered: tool schemas and call arguments keep their key order, as json.dumps writes them.
using json = nlohmann::ordered_json;

constexpr std::string_view kAccepted =
    "alpaca {instruction, input?, output, system?, history?}, sharegpt {conversations: [{from, value}], system?}, "
    "messages {messages: [{role, content}]}";

bool is_blank(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (!utf8::is_python_space(utf8::decode(s, i))) return false;
  }
  return true;
}

bool is_ascii_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error ..."
// without the prefix and the position (which the diagnostic carries).
std::string clean_parse_error(std::string_view what, std::int64_t* line, std::int64_t* column) {
  const auto close = what.find("] ");
  if (close != std::string_view::npos) what.remove_prefix(close + 2);
  const auto at = what.find(" at line ");
  if (at != std::string_view::npos) {
    std::string_view rest = what.substr(at + 9);
    const auto comma = rest.find(", column ");
    const auto colon = rest.find(": ");
    if (comma != std::string_view::npos && colon != std::string_view::npos && comma < colon) {
      if (line) *line = text::parse_int(rest.substr(0, comma)).value_or(0);
      if (column) *column = text::parse_int(rest.substr(comma + 9, colon - comma - 9)).value_or(0);
      what = rest.substr(colon + 2);
    }
  }
  // nlohmann quotes the token it stopped at ("last read: '...'"), which may be a whole
  // 100 MB line: the message keeps its first bytes and names the length.
  return text::excerpt(what);
}

// 0.5 -> "50", 0.006 -> "0.6", 1/3 -> "33.33"
std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", share * 100.0);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string keys_of(const json& o) {
  std::vector<std::string> keys;
  for (auto it = o.begin(); it != o.end() && keys.size() < 12; ++it) keys.push_back(text::quoted(it.key()));
  if (o.size() > keys.size()) keys.push_back("...");
  return keys.empty() ? std::string("no keys") : "keys " + text::join(keys, ", ");
}

std::optional<DatasetFormat> shape_of(const json& o) {
  if (o.contains("messages")) return DatasetFormat::Messages;
  if (o.contains("conversations")) return DatasetFormat::ShareGpt;
  if (o.contains("instruction") || o.contains("output")) return DatasetFormat::Alpaca;
  return std::nullopt;
}

// Why a record is not a sample: the key concerned and what was expected.
struct RecordError {
  std::string key;
  std::string message;
};

// A string member. Absent, or null when optional: nullopt.
bool string_member(const json& o, const std::string& key, const std::string& where, bool required,
                   std::optional<std::string>& out, RecordError& e) {
  out.reset();
  const auto it = o.find(key);
  if (it == o.end() || (it->is_null() && !required)) {
    if (!required) return true;
    e = {where, it == o.end() ? "missing; expected a string" : "is null; expected a string"};
    return false;
  }
  if (!it->is_string()) {
    e = {where, std::string("expected a string, found ") + it->type_name()};
    return false;
  }
  out = it->get<std::string>();
  return true;
}

std::string idx(std::size_t i) { return "[" + std::to_string(i) + "]"; }

// Turn order: [system], then user and assistant alternating from user and ending with the
// assistant; an assistant turn that calls tools is followed by one or more tool results, then
// the assistant again. Answers without tool calls are not blank. `list`, `role`, `content` name
// the keys for messages.
bool check_turns(const std::vector<ChatMessage>& m, const std::string& list, const std::string& role,
                 const std::string& content, RecordError& e) {
  if (m.empty()) {
    e = {list, "is empty; expected a user turn and the assistant's answer"};
    return false;
  }
  std::size_t i = m[0].role == "system" ? 1 : 0;
  if (i == m.size()) {
    e = {list, "holds only a system turn; expected a user turn and the assistant's answer after it"};
    return false;
  }
  enum class Want { User, Assistant, ToolResult, ToolResultOrAssistant } want = Want::User;
  std::size_t caller = 0;  // the assistant turn whose calls the tool results answer
  auto found = [](const std::string& r) {
    return "found " + (r == "tool" ? std::string("a tool result") : (r == "assistant" ? "an " : "a ") + r + " turn");
  };
  for (; i < m.size(); ++i) {
    const std::string& r = m[i].role;
    const std::string at = list + idx(i) + role;
    if (r == "system") {
      e = {at, "a system turn is only allowed first"};
      return false;
    }
    if (want == Want::ToolResultOrAssistant && r == "tool") continue;
    if (want == Want::ToolResultOrAssistant) want = Want::Assistant;
    switch (want) {
      case Want::User:
        if (r != "user") {
          e = {at, "expected a user turn here, " + found(r) +
                       " (after an optional system turn, turns alternate user, "
                       "assistant, starting with user; tool results follow the assistant turn that calls the tools)"};
          return false;
        }
        want = Want::Assistant;
        break;
      case Want::Assistant:
        if (r != "assistant") {
          e = {at, "expected an assistant turn here, " + found(r) + " (turns alternate user, assistant)"};
          return false;
        }
        if (!m[i].tool_calls.empty()) {
          want = Want::ToolResult;
          caller = i;
        } else if (is_blank(m[i].content)) {
          e = {list + idx(i) + content, "the assistant's answer is empty"};
          return false;
        } else {
          want = Want::User;
        }
        break;
      case Want::ToolResult:
        if (r != "tool") {
          e = {at,
               "expected the result of the tool calls of " + list + idx(caller) + " (a tool turn) here, " + found(r)};
          return false;
        }
        want = Want::ToolResultOrAssistant;
        break;
      case Want::ToolResultOrAssistant: break;
    }
  }
  if (m.back().role != "assistant") {
    e = {list + idx(m.size() - 1) + role,
         m.back().role == "tool" ? "the conversation ends with a tool result; it must end with the assistant's answer"
                                 : "the conversation ends with a user turn; it must end with the assistant's answer"};
    return false;
  }
  return true;
}

// One tool call in the form chat templates read, {"type": "function", "function": {"name",
// "arguments"}, "id"?}; the flat {"name", "arguments"} form (ms-swift's tool_call content) is
// wrapped into it.
bool tool_call(const json& c, const std::string& at, json& out, RecordError& e) {
  if (!c.is_object()) {
    e = {at,
         std::string("expected a tool call object {\"function\": {\"name\", \"arguments\"}}, found ") + c.type_name()};
    return false;
  }
  const json* fn = &c;
  std::string where = at;
  if (c.contains("function")) {
    fn = &c["function"];
    where = at + ".function";
    if (!fn->is_object()) {
      e = {where, std::string("expected an object {name, arguments}, found ") + fn->type_name()};
      return false;
    }
  }
  if (!fn->contains("name") || !(*fn)["name"].is_string()) {
    e = {where + ".name", "expected the called function's name (a string)"};
    return false;
  }
  if (fn->contains("arguments") && !(*fn)["arguments"].is_object() && !(*fn)["arguments"].is_string()) {
    e = {where + ".arguments",
         std::string("expected an object or a JSON string, found ") + (*fn)["arguments"].type_name()};
    return false;
  }
  if (fn == &c) {
    json wrapped = json::object();
    wrapped["type"] = "function";
    wrapped["function"] = c;
    out.push_back(std::move(wrapped));
  } else {
    out.push_back(c);
  }
  return true;
}

// The record's tool schemas: a JSON array, or a string holding one (ms-swift's "tools").
bool tools_member(const json& o, std::string& tools, RecordError& e) {
  const auto it = o.find("tools");
  if (it == o.end() || it->is_null()) return true;
  json list = *it;
  if (it->is_string()) {
    list = json::parse(it->get_ref<const std::string&>(), nullptr, false);
    if (list.is_discarded()) {
      e = {"tools", "is a string but not valid JSON; expected a JSON array of tool schemas"};
      return false;
    }
  }
  if (!list.is_array()) {
    e = {"tools", std::string("expected an array of tool (function) schemas, found ") + list.type_name()};
    return false;
  }
  for (std::size_t i = 0; i < list.size(); ++i)
    if (!list[i].is_object()) {
      e = {"tools" + idx(i), std::string("expected a tool schema object, found ") + list[i].type_name()};
      return false;
    }
  if (!list.empty()) tools = list.dump();
  return true;
}

// ms-swift's agent turns: a tool_call message's content is the JSON of one call; consecutive
// calls join the assistant turn just before them (or a new one), as apply_chat_template takes them.
bool add_tool_call(std::vector<ChatMessage>& m, const std::string& content, const std::string& at, RecordError& e) {
  const json call = json::parse(content, nullptr, false);
  if (call.is_discarded()) {
    e = {at, "a tool_call's content must be the JSON of the call, {\"name\", \"arguments\"}; it is not valid JSON"};
    return false;
  }
  json calls = json::array();
  if (!tool_call(call, at, calls, e)) return false;
  if (m.empty() || m.back().role != "assistant") m.emplace_back("assistant", "");
  json all = m.back().tool_calls.empty() ? json::array() : json::parse(m.back().tool_calls);
  all.push_back(std::move(calls[0]));
  m.back().tool_calls = all.dump();
  return true;
}

bool to_alpaca(const json& o, std::vector<ChatMessage>& m, RecordError& e) {
  std::optional<std::string> instruction, input, output, system;
  if (!string_member(o, "instruction", "instruction", true, instruction, e)) return false;
  if (!string_member(o, "input", "input", false, input, e)) return false;
  if (!string_member(o, "output", "output", true, output, e)) return false;
  if (!string_member(o, "system", "system", false, system, e)) return false;
  if (system && !system->empty()) m.push_back({"system", *system, {}});
  // ms-swift's history: [[query, response], ...] before the instruction.
  const auto h = o.find("history");
  if (h != o.end() && !h->is_null()) {
    if (!h->is_array()) {
      e = {"history", std::string("expected an array of [query, response] pairs, found ") + h->type_name()};
      return false;
    }
    for (std::size_t i = 0; i < h->size(); ++i) {
      const json& pair = (*h)[i];
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
        e = {"history" + idx(i), "expected a [query, response] pair of strings"};
        return false;
      }
      if (is_blank(pair[1].get_ref<const std::string&>())) {
        e = {"history" + idx(i) + "[1]", "the assistant's answer is empty"};
        return false;
      }
      m.push_back({"user", pair[0].get<std::string>(), {}});
      m.push_back({"assistant", pair[1].get<std::string>(), {}});
    }
  }
  if (is_blank(*output)) {
    e = {"output", "the assistant's answer is empty"};
    return false;
  }
  // ms-swift: "instruction\ninput" when both are non-empty, else whichever is.
  std::string query = std::move(*instruction);
  if (input && !input->empty()) query = query.empty() ? *input : query + "\n" + *input;
  m.push_back({"user", std::move(query), {}});
  m.push_back({"assistant", std::move(*output), {}});
  return true;
}

bool to_sharegpt(const json& o, std::vector<ChatMessage>& m, RecordError& e) {
  std::optional<std::string> system;
  if (!string_member(o, "system", "system", false, system, e)) return false;
  const json& c = o["conversations"];
  if (!c.is_array()) {
    e = {"conversations", std::string("expected an array of {from, value} turns, found ") + c.type_name()};
    return false;
  }
  for (std::size_t i = 0; i < c.size(); ++i) {
    const std::string at = "conversations" + idx(i);
    if (!c[i].is_object()) {
      e = {at, std::string("expected an object {from, value}, found ") + c[i].type_name()};
      return false;
    }
    std::optional<std::string> from, value;
    if (!string_member(c[i], "from", at + ".from", true, from, e)) return false;
    if (!string_member(c[i], "value", at + ".value", true, value, e)) return false;
    std::string role;
    if (*from == "human" || *from == "user") role = "user";
    else if (*from == "gpt" || *from == "assistant") role = "assistant";
    else if (*from == "system") role = "system";
    else if (*from == "observation" || *from == "tool") role = "tool";
    else if (*from == "function_call") {
      if (!add_tool_call(m, *value, at + ".value", e)) return false;
      continue;
    } else {
      e = {at + ".from", "found " + text::quoted(*from) +
                             "; expected human, user, gpt, assistant, system, function_call or observation"};
      return false;
    }
    m.push_back({std::move(role), std::move(*value), {}});
  }
  if (!check_turns(m, "conversations", ".from", ".value", e)) return false;
  if (system && !system->empty()) {
    if (m[0].role == "system") {
      e = {"system", "a system prompt is given twice: this key and a first system turn in conversations"};
      return false;
    }
    m.insert(m.begin(), ChatMessage{"system", *system, {}});
  }
  return true;
}

bool to_messages(const json& o, std::vector<ChatMessage>& m, RecordError& e, bool check_order = true) {
  const json& list = o["messages"];
  if (!list.is_array()) {
    e = {"messages", std::string("expected an array of {role, content} messages, found ") + list.type_name()};
    return false;
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = "messages" + idx(i);
    if (!list[i].is_object()) {
      e = {at, std::string("expected an object {role, content}, found ") + list[i].type_name()};
      return false;
    }
    const json& msg = list[i];
    std::optional<std::string> role, content, reasoning, name, call_id;
    if (!string_member(msg, "role", at + ".role", true, role, e)) return false;
    if (*role == "tool_response") *role = "tool";  // ms-swift's agent format
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool" && *role != "tool_call") {
      e = {at + ".role", "found " + text::quoted(*role) +
                             "; expected system, user, assistant or tool (ms-swift's tool_call and tool_response too)"};
      return false;
    }
    const bool calls = *role == "assistant" && msg.contains("tool_calls") && !msg["tool_calls"].is_null();
    // An assistant turn that only calls tools may have null content.
    if (!string_member(msg, "content", at + ".content", !calls, content, e)) return false;
    if (*role == "tool_call") {
      if (!add_tool_call(m, *content, at + ".content", e)) return false;
      continue;
    }
    if (!string_member(msg, "reasoning_content", at + ".reasoning_content", false, reasoning, e)) return false;
    ChatMessage cm(std::move(*role), content.value_or(""), std::move(reasoning));
    if (!content) cm.content_form = msg.contains("content") ? ChatMessage::Form::Null : ChatMessage::Form::Absent;
    if (calls) {
      const json& c = msg["tool_calls"];
      if (!c.is_array()) {
        e = {at + ".tool_calls", std::string("expected an array of tool calls, found ") + c.type_name()};
        return false;
      }
      json normalized = json::array();
      for (std::size_t k = 0; k < c.size(); ++k)
        if (!tool_call(c[k], at + ".tool_calls" + idx(k), normalized, e)) return false;
      if (!normalized.empty()) cm.tool_calls = normalized.dump();
    }
    if (cm.role == "tool") {
      if (!string_member(msg, "name", at + ".name", false, name, e)) return false;
      if (!string_member(msg, "tool_call_id", at + ".tool_call_id", false, call_id, e)) return false;
      cm.name = name.value_or("");
      cm.tool_call_id = call_id.value_or("");
    }
    m.push_back(std::move(cm));
  }
  return !check_order || check_turns(m, "messages", ".role", ".content", e);
}

bool convert(DatasetFormat f, const json& o, Sample& s, RecordError& e) {
  if (f != DatasetFormat::Alpaca && !tools_member(o, s.tools, e)) return false;
  switch (f) {
    case DatasetFormat::Alpaca: return to_alpaca(o, s.messages, e);
    case DatasetFormat::ShareGpt: return to_sharegpt(o, s.messages, e);
    case DatasetFormat::Messages: return to_messages(o, s.messages, e);
  }
  return false;
}

// Where a record is: a line of a JSON Lines file, or an element of a JSON array.
struct Where {
  std::int64_t line = 0;    // 1-based, 0 for arrays
  std::int64_t index = -1;  // array element, -1 for lines
};

class FileReader {
 public:
  FileReader(std::string path, const LoadOptions& o) : path_(std::move(path)), o_(o) {}

  FileReport report;
  std::vector<Sample> samples;

  void bad(const Where& w, const std::string& key, const std::string& message, std::int64_t column = 0) {
    ++report.malformed;
    if (listed_.size() >= o_.max_listed) return;
    std::string k = key;
    if (w.index >= 0) k = "[" + std::to_string(w.index) + "]" + (key.empty() ? "" : "." + key);
    listed_.push_back(diagnostic_at(Severity::Warning, path_, std::move(k), message, w.line, column));
  }

  void record(const json& j, const Where& w) {
    if (!j.is_object()) {
      bad(w, "", std::string("expected a JSON object, found ") + j.type_name());
      return;
    }
    any_object_ = true;
    const auto shape = shape_of(j);
    if (!shape) {
      if (first_keys_.empty()) first_keys_ = keys_of(j) + " (" + where(w) + ")";
      bad(w, "", "no known format: found " + keys_of(j) + "; expected " + std::string(kAccepted));
      return;
    }
    any_shaped_ = true;
    if (format_ && *shape != *format_) {
      bad(w, "",
          "this record is in " + std::string(format_name(*shape)) + " format, but the file is " +
              std::string(format_name(*format_)) + " (detected from " + detected_at_ + "); a file holds one format");
      return;
    }
    Sample s;
    RecordError e;
    if (!convert(*shape, j, s, e)) {
      bad(w, e.key, e.message);
      return;
    }
    if (!format_) {
      format_ = shape;
      detected_at_ = where(w);
      report.format = std::string(format_name(*shape));
    }
    s.origin = w.index >= 0 ? path_ + ":[" + std::to_string(w.index) + "]" : path_ + ":" + std::to_string(w.line);
    samples.push_back(std::move(s));
    ++report.samples;
  }

  // The verdict on the whole file, once every record is read.
  void finish(Diagnostics& d, bool array) {
    auto listed = [&](Severity s) {
      for (auto& x : listed_) {
        x.severity = s;
        d.push_back(x);
      }
      if (report.malformed > static_cast<std::int64_t>(listed_.size()))
        d.push_back(diagnostic_at(Severity::Note, path_, {},
                                  "... and " +
                                      std::to_string(report.malformed - static_cast<std::int64_t>(listed_.size())) +
                                      " more malformed records"));
    };
    const std::string records = array ? "elements" : "lines";
    if (report.lines == 0) {
      d.push_back(diagnostic_at(Severity::Error, path_, {},
                                array ? "the JSON array is empty; expected training records"
                                      : "the file is empty (blank lines only); expected one JSON object per line"));
      return;
    }
    if (report.samples == 0) {
      if (!any_object_) {
        d.push_back(
            diagnostic_at(Severity::Error, path_, {},
                          "every record is malformed (" + std::to_string(report.lines) + " " + records +
                              ", none a JSON object); expected one JSON object per line or a JSON array of objects"));
      } else if (!any_shaped_) {
        d.push_back(diagnostic_at(Severity::Error, path_, {},
                                  "unknown dataset format: the records have " + first_keys_ +
                                      "; accepted formats: " + std::string(kAccepted)));
      } else {
        d.push_back(diagnostic_at(Severity::Error, path_, {},
                                  "no valid samples: all " + std::to_string(report.lines) + " records are malformed"));
      }
      listed(Severity::Error);
      return;
    }
    const double share = static_cast<double>(report.malformed) / static_cast<double>(report.lines);
    if (report.malformed > 0 && share > o_.max_bad_sample_ratio) {
      d.push_back(diagnostic_at(Severity::Error, path_, {},
                                std::to_string(report.malformed) + " of " + std::to_string(report.lines) +
                                    " records (" + percent(share) +
                                    "%) are malformed, more than max_bad_sample_ratio " +
                                    text::format_double(o_.max_bad_sample_ratio) + " allows; the first ones:"));
      listed(Severity::Error);
      return;
    }
    if (report.malformed > 0) {
      d.push_back(diagnostic_at(Severity::Warning, path_, {},
                                "skipped " + std::to_string(report.malformed) + " malformed of " +
                                    std::to_string(report.lines) + " records (within max_bad_sample_ratio " +
                                    text::format_double(o_.max_bad_sample_ratio) + "):"));
      listed(Severity::Warning);
    }
  }

 private:
  static std::string where(const Where& w) {
    return w.index >= 0 ? "element [" + std::to_string(w.index) + "]" : "line " + std::to_string(w.line);
  }

  std::string path_;
  const LoadOptions& o_;
  std::optional<DatasetFormat> format_;
  std::string detected_at_;
  std::string first_keys_;
  bool any_object_ = false;
  bool any_shaped_ = false;
  std::vector<Diagnostic> listed_;
};

// The first character after a UTF-8 BOM and whitespace; nullopt for an empty file.
std::optional<char> first_significant(std::istream& in) {
  char c;
  bool first = true;
  while (in.get(c)) {
    if (first && static_cast<unsigned char>(c) == 0xEF) {
      char b[2];
      if (in.read(b, 2) && static_cast<unsigned char>(b[0]) == 0xBB && static_cast<unsigned char>(b[1]) == 0xBF) {
        first = false;
        continue;
      }
      return c;
    }
    first = false;
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return c;
  }
  return std::nullopt;
}

void read_lines(std::istream& in, FileReader& r, const std::string& path, Diagnostics& d) {
  std::string line;
  std::int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1 && line.size() >= 3 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_ascii_blank(line)) continue;
    ++r.report.lines;
    const Where w{n, -1};
    const std::size_t badbyte = utf8::find_invalid(line);
    if (badbyte != utf8::npos) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(line[badbyte])));
      r.bad(w, "", std::string("invalid UTF-8 (byte ") + hex + "); the file must be UTF-8",
            static_cast<std::int64_t>(badbyte) + 1);
      continue;
    }
    if (const std::size_t depth = json_nesting_depth(line); depth > kMaxJsonDepth) {
      r.bad(w, "",
            "nested " + std::to_string(depth) + " levels deep; at most " + std::to_string(kMaxJsonDepth) +
                " are accepted",
            0);
      continue;
    }
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      std::int64_t l = 0, col = 0;
      const std::string msg = clean_parse_error(e.what(), &l, &col);
      r.bad(w, "", "not valid JSON: " + msg, col);
      continue;
    } catch (const std::exception& e) {
      r.bad(w, "", "not valid JSON: " + text::excerpt(e.what()));
      continue;
    }
    r.record(j, w);
  }
  if (in.bad())
    d.push_back(diagnostic_at(Severity::Error, path, {},
                              "read failed after line " + std::to_string(n) + ": " + std::strerror(errno)));
}

bool read_array(std::istream& in, FileReader& r, const std::string& path, Diagnostics& d) {
  std::int64_t index = 0;
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && (ev == json::parse_event_t::object_end || ev == json::parse_event_t::array_end ||
                       ev == json::parse_event_t::value)) {
      ++r.report.lines;
      r.record(parsed, Where{0, index++});
      return false;  // processed: not kept in the array
    }
    return true;
  };
  try {
    const json top = json::parse(in, cb, true, false);
    (void)top;
  } catch (const json::parse_error& e) {
    std::int64_t line = 0, col = 0;
    const std::string msg = clean_parse_error(e.what(), &line, &col);
    d.push_back(diagnostic_at(Severity::Error, path, "", "not a valid JSON array: " + msg, line, col));
    return false;
  } catch (const std::exception& e) {
    d.push_back(diagnostic_at(Severity::Error, path, {}, "cannot be read as a JSON array: " + text::excerpt(e.what())));
    return false;
  }
  return true;
}

}  // namespace

std::string_view format_name(DatasetFormat f) {
  switch (f) {
    case DatasetFormat::Alpaca: return "alpaca";
    case DatasetFormat::ShareGpt: return "sharegpt";
    case DatasetFormat::Messages: return "messages";
  }
  return "";
}

bool same_sample(const Sample& a, const Sample& b) {
  if (a.origin != b.origin || a.messages.size() != b.messages.size()) return false;
  for (std::size_t i = 0; i < a.messages.size(); ++i) {
    const ChatMessage &x = a.messages[i], &y = b.messages[i];
    if (x.role != y.role || x.content != y.content || x.reasoning_content != y.reasoning_content ||
        x.tool_calls != y.tool_calls || x.name != y.name || x.tool_call_id != y.tool_call_id ||
        x.content_form != y.content_form)
      return false;
  }
  return a.tools == b.tools;
}

std::string summary(const FileReport& r) {
  std::string s = (r.path.empty() ? r.spec : r.path) + ": " + (r.format.empty() ? "no format" : r.format) + ", " +
                  std::to_string(r.lines) + " records, " + std::to_string(r.samples) + " samples, " +
                  std::to_string(r.malformed) + " malformed, " + std::to_string(r.selected) + " selected";
  if (r.requested >= 0) s += " (#" + std::to_string(r.requested) + ")";
  return s;
}

std::string resolve_dataset_path(const std::string& path, const std::string& base_dir) {
  std::string p = path;
  if (p == "~" || text::starts_with(p, "~/")) {
    if (const char* home = std::getenv("HOME"); home && *home) p = std::string(home) + p.substr(1);
  }
  fs::path fp(p);
  if (fp.is_relative() && !base_dir.empty()) fp = fs::path(base_dir) / fp;
  return fp.lexically_normal().string();
}

Result<FileData> read_dataset_file(const std::string& path, const LoadOptions& options) {
  Result<FileData> r;
  r.value.report.path = path;
  r.value.report.spec = path;
  auto fail = [&](std::string msg) {
    r.diagnostics.push_back(diagnostic_at(Severity::Error, path, {}, std::move(msg)));
    return r;
  };
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return fail("cannot be read: " + ec.message());
  if (!fs::exists(st)) return fail("no such file; expected a .jsonl or .json dataset");
  if (fs::is_directory(st)) return fail("is a directory; expected a .jsonl or .json file");
  if (!fs::is_regular_file(st)) return fail(regular_file_problem(path) + "; expected a .jsonl or .json file");
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext != ".jsonl" && ext != ".json")
    return fail("unsupported file type " + text::quoted(ext.empty() ? std::string("(none)") : ext) +
                "; Odyssey reads .jsonl (one JSON object per line) and .json (a JSON array of objects)");
  RegularFileStream in(path);  // never blocks on a FIFO swapped in after the stat above
  if (!in.is_open()) return fail(in.error() + "; expected a .jsonl or .json file");
  const auto first = first_significant(in);
  if (in.bad()) return fail(std::string("read failed: ") + std::strerror(errno));
  if (!first) return fail("the file is empty; expected one JSON object per line (.jsonl) or a JSON array of objects");
  in.clear();
  in.seekg(0);
  FileReader reader(path, options);
  const bool array = *first == '[';
  if (array) {
    if (!read_array(in, reader, path, r.diagnostics)) {
      r.value.report = reader.report;
      r.value.report.spec = path;
      return r;
    }
  } else {
    read_lines(in, reader, path, r.diagnostics);
  }
  reader.finish(r.diagnostics, array);
  reader.report.path = path;
  reader.report.spec = path;
  r.value.report = reader.report;
  if (r.ok()) {
    r.value.samples = std::move(reader.samples);
    r.value.report.selected = r.value.report.samples;
  }
  return r;
}

namespace {

// Counts the elements of a top-level JSON array without building them.
struct ElementCounter {
  std::int64_t depth = 0, elements = 0;
  std::string error;
  bool value() {
    if (depth == 1) ++elements;
    return true;
  }
  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) { return value(), ++depth, true; }
  bool key(json::string_t&) { return true; }
  bool end_object() { return --depth, true; }
  bool start_array(std::size_t) { return value(), ++depth, true; }
  bool end_array() { return --depth, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }
};

}  // namespace

Result<std::int64_t> count_dataset_records(const std::string& path) {
  Result<std::int64_t> r;
  RegularFileStream in(path);
  if (!in.is_open()) {
    r.diagnostics.push_back(diagnostic_at(Severity::Error, path, {}, in.error() + "; expected a .jsonl or .json file"));
    return r;
  }
  const auto first = first_significant(in);
  if (!first) return r;  // empty: read_dataset_file words that error
  in.clear();
  in.seekg(0);
  if (*first == '[') {
    ElementCounter c;
    json::sax_parse(in, &c);
    if (!c.error.empty()) {
      std::int64_t line = 0, col = 0;
      const std::string msg = clean_parse_error(c.error, &line, &col);
      r.diagnostics.push_back(diagnostic_at(Severity::Error, path, "", "not a valid JSON array: " + msg, line, col));
      return r;
    }
    r.value = c.elements;
  } else {
    // Non-blank lines, read in blocks: a 100 MB line is never held whole.
    std::vector<char> buf(1 << 16);
    bool blank = true;
    std::int64_t lines = 0;
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      for (std::streamsize i = 0; i < in.gcount(); ++i) {
        const char ch = buf[static_cast<std::size_t>(i)];
        if (ch == '\n') {
          lines += blank ? 0 : 1;
          blank = true;
        } else if (ch != ' ' && ch != '\t' && ch != '\r') {
          blank = false;
        }
      }
    }
    r.value = lines + (blank ? 0 : 1);
  }
  if (in.bad())
    r.diagnostics.push_back(
        diagnostic_at(Severity::Error, path, {}, std::string("read failed: ") + std::strerror(errno)));
  return r;
}

Result<LoadedDatasets> load_datasets(const std::vector<std::string>& specs, const LoadOptions& options) {
  Result<LoadedDatasets> r;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const std::string& spec = specs[k];
    DatasetSpec ds;
    std::string error;
    FileReport report;
    report.spec = spec;
    if (!parse_dataset_spec(spec, &ds, &error)) {
      r.diagnostics.push_back(diagnostic_at(Severity::Error, "", "dataset", text::quoted(spec) + ": " + error));
      r.value.files.push_back(report);
      continue;
    }
    const std::string path = resolve_dataset_path(ds.path, options.base_dir);
    auto file = read_dataset_file(path, options);
    r.diagnostics.insert(r.diagnostics.end(), file.diagnostics.begin(), file.diagnostics.end());
    report = file.value.report;
    report.spec = spec;
    report.requested = ds.samples;
    if (!file.ok()) {
      report.selected = 0;
      r.value.files.push_back(report);
      continue;
    }
    auto& samples = file.value.samples;
    if (const std::string why = sample_request_problem(ds.samples, static_cast<std::int64_t>(samples.size()));
        !why.empty()) {
      r.diagnostics.push_back(diagnostic_at(Severity::Error, path, "dataset", text::quoted(spec) + ": " + why));
      report.selected = 0;
      r.value.files.push_back(report);
      continue;
    }
    const auto picked = sample_indices(samples.size(), ds.samples, mix_seed(options.seed, k));
    if (ds.samples > static_cast<std::int64_t>(samples.size())) {
      const auto n = static_cast<std::int64_t>(samples.size());
      r.diagnostics.push_back(
          diagnostic_at(Severity::Warning, path, {},
                        "#" + std::to_string(ds.samples) + " asks for more samples than the file's " +
                            std::to_string(n) + ": each sample is used " + std::to_string(ds.samples / n) + " time(s)" +
                            (ds.samples % n ? " and " + std::to_string(ds.samples % n) + " more are drawn at random"
                                            : std::string())));
      for (std::size_t i : picked) r.value.samples.push_back(samples[i]);
    } else {
      for (std::size_t i : picked) r.value.samples.push_back(std::move(samples[i]));
    }
    report.selected = static_cast<std::int64_t>(picked.size());
    r.value.files.push_back(report);
  }
  if (specs.empty()) r.diagnostics.push_back(diagnostic_at(Severity::Error, "", "dataset", "no dataset given"));
  if (!r.ok()) r.value.samples.clear();
  return r;
}

// ---- seeded choices ---------------------------------------------------------------------

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (rejection of the incomplete last block).
std::uint64_t bounded(std::uint64_t& state, std::uint64_t bound) {
  const std::uint64_t limit =
      std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % bound;
  std::uint64_t x;
  do x = splitmix64(state);
  while (x >= limit);
  return x % bound;
}

}  // namespace

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t s = seed ^ (stream * 0xD1B54A32D192ED03ULL);
  return splitmix64(s);
}

std::vector<std::size_t> seeded_permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = i;
  std::uint64_t state = seed;
  for (std::size_t i = n; i > 1; --i) std::swap(p[i - 1], p[bounded(state, i)]);
  return p;
}

std::vector<std::size_t> sample_indices(std::size_t available, std::int64_t n, std::uint64_t seed) {
  std::vector<std::size_t> out;
  if (n < 0) {
    out.resize(available);
    for (std::size_t i = 0; i < available; ++i) out[i] = i;
    return out;
  }
  if (available == 0) return out;
  const auto want = static_cast<std::size_t>(n);
  out.reserve(want);
  for (std::size_t rep = 0; rep < want / available; ++rep)
    for (std::size_t i = 0; i < available; ++i) out.push_back(i);
  const std::size_t rest = want % available;
  if (rest) {
    const auto p = seeded_permutation(available, seed);
    out.insert(out.end(), p.begin(), p.begin() + static_cast<std::ptrdiff_t>(rest));
  }
  return out;
}

Result<std::vector<bool>> validation_mask(std::size_t n, double ratio, std::uint64_t seed) {
  Result<std::vector<bool>> r;
  r.value.assign(n, false);
  if (!(ratio > 0.0)) {
    if (std::isnan(ratio))
      r.diagnostics.push_back(diagnostic_at(Severity::Error, "", "split_dataset_ratio", "must be a number in [0, 1)"));
    return r;
  }
  if (ratio >= 1.0) {
    r.diagnostics.push_back(diagnostic_at(
        Severity::Error, "", "split_dataset_ratio",
        "found " + text::format_double(ratio) + "; expected a share below 1 (some data must remain for training)"));
    return r;
  }
  if (n < 2) {
    r.diagnostics.push_back(diagnostic_at(Severity::Error, "", "split_dataset_ratio",
                                          "cannot hold out a validation share of " + std::to_string(n) +
                                              " sample(s): at least 2 are needed (one to train, one to validate)"));
    return r;
  }
  // ceil, forgiving the rounding of products such as 0.3 * 10 = 3.0000000000000004
  auto k = static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(n) - 1e-9));
  k = std::clamp<std::size_t>(k, 1, n - 1);
  const auto p = seeded_permutation(n, seed);
  for (std::size_t i = 0; i < k; ++i) r.value[p[i]] = true;
  return r;
}

Result<Sample> parse_conversation(std::string_view json_text, const std::string& file) {
  Result<Sample> r;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    std::int64_t line = 0, col = 0;
    const std::string msg = clean_parse_error(e.what(), &line, &col);
    r.diagnostics.push_back(diagnostic_at(Severity::Error, file, "", "not valid JSON: " + msg, line, col));
    return r;
  }
  if (j.is_array()) j = json{{"messages", std::move(j)}};
  if (!j.is_object() || !j.contains("messages")) {
    r.diagnostics.push_back(
        diagnostic_at(Severity::Error, file, {},
                      std::string("expected a JSON array of {role, content} messages or an object with "
                                  "\"messages\" (and \"tools\"), found ") +
                          (j.is_object() ? "an object without \"messages\"" : j.type_name())));
    return r;
  }
  RecordError e;
  if (!tools_member(j, r.value.tools, e) || !to_messages(j, r.value.messages, e, false)) {
    r.diagnostics.push_back(diagnostic_at(Severity::Error, file, e.key, e.message));
    r.value = {};
    return r;
  }
  if (r.value.messages.empty())
    r.diagnostics.push_back(
        diagnostic_at(Severity::Error, file, "messages", "is empty; expected at least one message"));
  r.value.origin = file;
  return r;
}

}  // namespace odyssey::data
