#include "infer/request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "common/json_dump.h"
#include "common/text.h"
#include "data/dataset.h"

namespace odyssey::infer {

namespace {

using json = nlohmann::json;

struct Parser {
  const std::string& where;
  Diagnostics& out;
  void fail(const std::string& key, const std::string& message) {
    Diagnostic d;
    d.file = where;
    d.key = key;
    d.message = message;
    out.push_back(std::move(d));
  }
  std::string found(const json& v) {
    return "found " + text::excerpt(v.dump(-1, ' ', false, json::error_handler_t::replace), 80);
  }

  void number(const json& j, const char* key, double* dst) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number() || !std::isfinite(it->get<double>())) return fail(key, "expected a number, " + found(*it));
    *dst = it->get<double>();
  }
  template <typename Int>
  void integer(const json& j, const char* key, Int* dst, std::int64_t lo) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number_integer() || it->get<std::int64_t>() < lo)
      return fail(key, "expected a whole number >= " + std::to_string(lo) + ", " + found(*it));
    *dst = static_cast<Int>(it->get<std::int64_t>());
  }
  void boolean(const json& j, const char* key, bool* dst) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_boolean()) return fail(key, "expected true or false, " + found(*it));
    *dst = it->get<bool>();
  }
};

}  // namespace

Result<Request> parse_request(std::string_view line, RequestKind kind, const model::GenerationOptions& defaults,
                              const std::string& where) {
  Result<Request> r;
  Parser p{where, r.diagnostics};
  if (const std::size_t depth = json_nesting_depth(line); depth > kMaxJsonDepth) {
    p.fail("", "nested " + std::to_string(depth) + " levels deep; at most " + std::to_string(kMaxJsonDepth) +
                   " are accepted");
    return r;
  }
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    p.fail("", std::string("not valid JSON: ") + e.what());
    return r;
  }
  if (!j.is_object()) {
    p.fail("", "expected a JSON object, " + p.found(j));
    return r;
  }
  Request& q = r.value;
  q.options = defaults;
  if (auto it = j.find("id"); it != j.end()) q.id = *it;
  if (kind == RequestKind::Protocol) {
    static const std::set<std::string> known{
        "id",    "type",      "prompt",          "prompt_ids",         "messages",
        "tools", "adapter",   "enable_thinking", "max_new_tokens",     "temperature",
        "top_k", "top_p",     "min_p",           "repetition_penalty", "seed",
        "stop",  "ignore_eos"};
    for (const auto& [key, value] : j.items())
      if (!known.count(key)) {
        std::vector<std::string> names(known.begin(), known.end());
        const auto near = text::closest(key, names);
        p.fail(key, "is not a request field" + (near ? "; did you mean " + text::quoted(*near) + "?" : std::string()));
      }
    if (auto it = j.find("type"); it != j.end()) {
      const std::string t = it->is_string() ? it->get<std::string>() : std::string();
      if (t == "cancel") q.type = Request::Type::Cancel;
      else if (t == "shutdown") q.type = Request::Type::Shutdown;
      else if (t != "generate") p.fail("type", "expected generate, cancel or shutdown, " + p.found(*it));
    }
    if (!r.ok() || q.type != Request::Type::Generate) return r;
    if (auto it = j.find("adapter"); it != j.end()) {
      if (it->is_null()) q.adapter = std::string();
      else if (it->is_string()) q.adapter = it->get<std::string>();
      else p.fail("adapter", "expected a PEFT adapter directory or null (the base model), " + p.found(*it));
    }
    if (auto it = j.find("enable_thinking"); it != j.end() && !it->is_null()) {
      if (it->is_boolean()) q.enable_thinking = it->get<bool>();
      else p.fail("enable_thinking", "expected true or false, " + p.found(*it));
    }
    model::GenerationOptions& o = q.options;
    p.integer(j, "max_new_tokens", &o.max_new_tokens, 1);
    p.number(j, "temperature", &o.sampling.temperature);
    p.integer(j, "top_k", &o.sampling.top_k, 0);
    p.number(j, "top_p", &o.sampling.top_p);
    p.number(j, "min_p", &o.sampling.min_p);
    p.number(j, "repetition_penalty", &o.sampling.repetition_penalty);
    p.integer(j, "seed", &o.sampling.seed, 0);
    p.boolean(j, "ignore_eos", &o.ignore_eos);
    if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
      o.stop.clear();
      if (it->is_string()) {
        o.stop.push_back(it->get<std::string>());
      } else if (it->is_array() && std::all_of(it->begin(), it->end(), [](const json& s) { return s.is_string(); })) {
        for (const auto& s : *it) o.stop.push_back(s.get<std::string>());
      } else {
        p.fail("stop", "expected a string or a list of strings, " + p.found(*it));
      }
    }
    for (auto& d : model::check_generation_options(o)) {
      d.file = where;
      r.diagnostics.push_back(std::move(d));
    }
  }
  const int given = int(j.contains("prompt")) + int(j.contains("messages")) + int(j.contains("prompt_ids"));
  if (given != 1) {
    p.fail("", given ? "give one of \"prompt\", \"prompt_ids\" and \"messages\", not several"
                     : "expected \"prompt\" (raw text), \"prompt_ids\" (token ids) or \"messages\"");
    return r;
  }
  if (auto it = j.find("prompt_ids"); it != j.end()) {
    const bool ids = it->is_array() && !it->empty() && std::all_of(it->begin(), it->end(), [](const json& v) {
                       return v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= INT32_MAX;
                     });
    if (!ids) {
      p.fail("prompt_ids", "expected a non-empty list of token ids, " + p.found(*it));
      return r;
    }
    for (const auto& v : *it) q.prompt.ids.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
    return r;
  }
  const bool has_prompt = j.contains("prompt");
  if (has_prompt) {
    if (!j["prompt"].is_string()) {
      p.fail("prompt", "expected a string (raw text, no chat template), " + p.found(j["prompt"]));
      return r;
    }
    q.prompt.text = j["prompt"].get<std::string>();
    if (q.prompt.text->empty()) p.fail("prompt", "is empty");
    return r;
  }
  json conv{{"messages", j["messages"]}};
  if (j.contains("tools")) conv["tools"] = j["tools"];
  auto sample = data::parse_conversation(conv.dump(-1, ' ', false, json::error_handler_t::replace), where);
  r.diagnostics.insert(r.diagnostics.end(), sample.diagnostics.begin(), sample.diagnostics.end());
  if (!sample.ok()) return r;
  q.prompt.messages = std::move(sample.value.messages);
  q.prompt.tools = std::move(sample.value.tools);
  // A conversation that ends with the assistant's answer (a dataset record): the answer is the
  // reference, the rest the prompt (generate only; chat continues whatever it is given).
  if (kind == RequestKind::PromptLine && q.prompt.messages.back().role == "assistant") {
    q.reference = q.prompt.messages.back().content;
    q.prompt.messages.pop_back();
    if (q.prompt.messages.empty()) p.fail("messages", "holds only an assistant turn: nothing to prompt with");
  }
  return r;
}

}  // namespace odyssey::infer
