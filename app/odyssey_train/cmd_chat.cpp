// `chat`: talk to a model (and adapter) on a terminal, or, with --json, serve the line protocol
// the window's Chat page speaks (docs/inference.md): one request a line on standard input,
// events a line on standard output. A reader thread takes the input so that a "cancel" can stop
// the generation running; every input that cannot be used gets an error event, never a crash.
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "commands.h"
#include "common/json_dump.h"
#include "common/text.h"
#include "infer_args.h"
#ifdef ODYSSEY_HAVE_TORCH
#include "infer/request.h"
#endif

namespace odyssey::cli {

CommandSpec chat_spec() {
  std::vector<OptionSpec> options = inference_options();
  options.push_back({"system", true, false, "TEXT", "a system prompt (terminal mode)"});
  options.push_back({"json", false, false, "", "serve the JSON line protocol on standard input/output"});
  return {"chat",
          "chat --model M [--adapter A] [--system TEXT] [sampling flags] [--json]",
          "Talk to a model (and a LoRA adapter): interactively, or as a JSON line protocol (--json).",
          "On a terminal: type a message, the answer streams back through the model's chat template; the\n"
          "conversation is kept. /reset forgets it, /system TEXT sets the system prompt, /exit (or Ctrl-D)\n"
          "quits; Ctrl-C stops an answer (at the prompt it quits). The model needs a chat template.\n\n"
          "With --json, one request a line on standard input:\n"
          "  {\"id\": ..., \"messages\": [...] | \"prompt\": \"raw text\", \"adapter\": DIR|null,\n"
          "   \"max_new_tokens\", \"temperature\", \"top_k\", \"top_p\", \"min_p\", \"repetition_penalty\", \"seed\",\n"
          "   \"stop\", \"ignore_eos\", \"enable_thinking\"}      (fields not given: the command line's values)\n"
          "  {\"type\": \"cancel\"[, \"id\"]}  stops the running generation (with an id: only that request's);\n"
          "  {\"type\": \"shutdown\"}  stops it and ends the process\n"
          "and events a line on standard output:\n"
          "  {\"event\": \"ready\", \"model\", \"device\", \"dtype\", \"template\", \"adapter\", \"protocol\": 1}\n"
          "  {\"event\": \"token\", \"id\", \"token\": N, \"text\": the text it adds}\n"
          "  {\"event\": \"done\", \"id\", \"text\", \"ids\", \"finish_reason\": \"stop\"|\"length\"|\"cancelled\",\n"
          "   \"prompt_tokens\", \"new_tokens\", \"tokens_per_s\", \"time_to_first_token_s\"}\n"
          "  {\"event\": \"error\", \"id\", \"line\": N, \"message\"}   (a request that cannot be served)\n"
          "\"adapter\" switches the adapter without reloading the base (null: the base alone). Requests are\n"
          "served in order; the process ends at the end of its input or at shutdown, exit code 0.\n\n"
          "Exit codes: 0 done, 1 the model or adapter could not be loaded, 2 usage.",
          options,
          0,
          0};
}

#ifndef ODYSSEY_HAVE_TORCH
int cmd_chat(const Args&) {
  std::cerr << "odyssey-train chat: this build has no LibTorch (configure with Torch to chat)\n";
  return kFailure;
}
#else

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read at the prompt returns, and the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

constexpr std::size_t kMaxLine = 16u << 20;  // a request line longer than this is refused

// Standard input's lines, read on a thread of their own.
class Inbox {
 public:
  struct Item {
    std::string line;
    int number = 0;
    bool oversize = false;
    bool eof = false;
  };
  void start() {
    reader_ = std::thread([this] { read(); });
  }
  // The next line (blocking); an eof item at the end of the input or after SIGINT/SIGTERM (the
  // signal may reach this thread rather than the reader: the wait wakes to look).
  Item pop() {
    std::unique_lock lock(m_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return !q_.empty(); }))
      if (g_interrupted.load()) return {{}, 0, false, true};
    Item it = std::move(q_.front());
    if (!it.eof) q_.pop_front();  // the end stays for the next pop
    return it;
  }
  // Takes a waiting "cancel" meant for the running request `id` (one without an id, or with
  // its id) and says whether a shutdown is queued, leaving every other line in place (the end of
  // the input is not a shutdown: the requests before it are served). Lines are parsed for
  // "type" and "id" only.
  bool take_cancel(const nlohmann::json& id, bool* shutdown) {
    std::lock_guard lock(m_);
    bool cancel = false;
    for (auto it = q_.begin(); it != q_.end();) {
      nlohmann::json j;
      if (!it->eof && !it->oversize && json_nesting_depth(it->line) <= kMaxJsonDepth)
        j = nlohmann::json::parse(it->line, nullptr, /*allow_exceptions=*/false);
      const auto type =
          j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : std::string();
      if (type == "shutdown") *shutdown = true;
      if (type == "cancel" && (!j.contains("id") || j["id"] == id)) {
        cancel = true;
        it = q_.erase(it);
      } else {
        ++it;
      }
    }
    return cancel || *shutdown;
  }
  bool at_end() const { return ended_.load(); }
  void join() {
    if (reader_.joinable()) reader_.join();
  }
  void detach() {
    if (reader_.joinable()) reader_.detach();
  }

 private:
  void push(Item it) {
    {
      std::lock_guard lock(m_);
      q_.push_back(std::move(it));
    }
    cv_.notify_one();
  }
  void read() {
    std::string line;
    bool over = false;
    int number = 1;
    static char buf[1 << 16];
    for (;;) {
      std::cin.getline(buf, sizeof buf);
      const std::streamsize got = std::cin.gcount();
      const bool eof = std::cin.eof();
      const bool full = std::cin.fail() && !eof && got == static_cast<std::streamsize>(sizeof buf) - 1;
      if (!full && std::cin.fail() && !eof) {  // a read error (or an interrupted read): the end
        push({{}, number, false, true});
        break;
      }
      const std::size_t stored = full || eof ? static_cast<std::size_t>(got) : static_cast<std::size_t>(got) - 1;
      if (!over) {
        line.append(buf, stored);
        if (line.size() > kMaxLine) {
          over = true;
          line.clear();
          line.shrink_to_fit();
        }
      }
      if (full) {
        std::cin.clear();
        continue;
      }
      if (over || !text::trim(line).empty()) push({line, number, over, false});
      line.clear();
      over = false;
      ++number;
      if (eof) {
        push({{}, number, false, true});
        break;
      }
    }
    ended_.store(true);
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Item> q_;
  std::thread reader_;
  std::atomic<bool> ended_{false};
};

void emit(const nlohmann::ordered_json& j) { std::cout << dump_json(j) << '\n' << std::flush; }

void emit_error(const nlohmann::json& id, int line, const std::string& message) {
  nlohmann::ordered_json j{{"event", "error"}, {"id", id}};
  if (line > 0) j["line"] = line;
  std::string m = message;
  while (!m.empty() && m.back() == '\n') m.pop_back();
  j["message"] = m;
  emit(j);
}

nlohmann::ordered_json done_event(const nlohmann::json& id, const model::GenerationResult& g) {
  nlohmann::ordered_json j{{"event", "done"}, {"id", id}};
  append_result(j, g);
  return j;
}

int serve(infer::Session& s, const model::GenerationOptions& defaults, std::optional<bool> thinking) {
  emit({{"event", "ready"},
        {"model", s.model_path()},
        {"device", s.device()},
        {"dtype", s.dtype()},
        {"template", s.has_template() ? nlohmann::ordered_json(s.template_name()) : nlohmann::ordered_json(nullptr)},
        {"adapter", s.adapter().empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s.adapter())},
        {"protocol", 1}});
  Inbox inbox;
  inbox.start();
  bool shutdown = false;
  while (!shutdown && !g_interrupted.load()) {
    Inbox::Item item = inbox.pop();
    if (item.eof) break;
    if (item.oversize) {
      emit_error(nullptr, item.number, "the request is longer than " + std::to_string(kMaxLine >> 20) + " MiB");
      continue;
    }
    auto parsed = infer::parse_request(item.line, infer::RequestKind::Protocol, defaults,
                                       "request " + std::to_string(item.number));
    const nlohmann::json id = parsed.value.id;
    if (!parsed.ok()) {
      emit_error(id, item.number, format_all(parsed.diagnostics));
      continue;
    }
    infer::Request& q = parsed.value;
    if (q.type == infer::Request::Type::Shutdown) break;
    if (q.type == infer::Request::Type::Cancel) {
      emit_error(id, item.number, "no generation is running to cancel");
      continue;
    }
    try {
      if (q.adapter) {
        const Diagnostics d = s.set_adapter(*q.adapter);
        if (has_errors(d)) {
          emit_error(id, item.number, format_all(d));
          continue;
        }
      }
      auto ids = s.encode(q.prompt, q.enable_thinking ? q.enable_thinking : thinking);
      if (!ids.ok()) {
        emit_error(id, item.number, format_all(ids.diagnostics));
        continue;
      }
      auto r = model::generate(s.lm(), {ids.value}, q.options, &s.tokenizer(),
                               [&](std::size_t, std::int32_t token, const std::string& delta) {
                                 emit({{"event", "token"}, {"id", id}, {"token", token}, {"text", delta}});
                                 if (inbox.take_cancel(id, &shutdown) || g_interrupted.load()) return false;
                                 return true;
                               });
      if (!r.ok()) {
        emit_error(id, item.number, format_all(r.diagnostics));
        continue;
      }
      emit(done_event(id, r.value.front()));
    } catch (const std::exception& e) {  // a CUDA error, out of memory: this request fails, the process stays
      emit_error(id, item.number, std::string("generation failed: ") + e.what());
    }
  }
  std::cout.flush();
  if (inbox.at_end()) {
    inbox.join();
    return kOk;
  }
  // The reader is blocked on standard input that is still open: leave without waiting for it.
  inbox.detach();
  std::_Exit(kOk);
}

int terminal(infer::Session& s, const model::GenerationOptions& options, std::optional<bool> thinking,
             const std::string& system) {
  if (!s.has_template()) {
    std::cerr << "odyssey-train chat: the model " << s.model_path()
              << " has no chat template Odyssey can use; give one with --template or --template-file, or use "
                 "`generate` with raw {\"prompt\": ...} lines\n";
    return kFailure;
  }
  std::cerr << "Chatting with " << s.model_path() << " (" << s.device() << ", " << s.dtype()
            << (s.adapter().empty() ? std::string() : ", adapter " + s.adapter()) << ", template " << s.template_name()
            << "). /reset forgets, /system TEXT sets the system prompt, /exit or Ctrl-D quits; Ctrl-C stops an "
               "answer.\n";
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.emplace_back("system", system);
  std::string line;
  for (;;) {
    std::cout << "\n> " << std::flush;
    g_interrupted.store(false);
    if (!std::getline(std::cin, line)) {
      std::cout << '\n';
      return kOk;
    }
    const std::string t = text::trim(line);
    if (t.empty()) continue;
    if (t == "/exit" || t == "/quit") return kOk;
    if (t == "/reset") {
      messages.erase(
          std::remove_if(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role != "system"; }),
          messages.end());
      std::cerr << "(conversation cleared)\n";
      continue;
    }
    if (t.starts_with("/system")) {
      std::erase_if(messages, [](const ChatMessage& m) { return m.role == "system"; });
      const std::string sys = text::trim(t.substr(7));
      if (!sys.empty()) messages.insert(messages.begin(), ChatMessage("system", sys));
      std::cerr << (sys.empty() ? "(system prompt removed)\n" : "(system prompt set)\n");
      continue;
    }
    messages.emplace_back("user", line);
    infer::Prompt p;
    p.messages = messages;
    auto ids = s.encode(p, thinking);
    if (!ids.ok()) {
      print_diagnostics(ids.diagnostics);
      messages.pop_back();
      continue;
    }
    try {
      auto r = model::generate(s.lm(), {ids.value}, options, &s.tokenizer(),
                               [&](std::size_t, std::int32_t, const std::string& delta) {
                                 std::cout << delta << std::flush;
                                 return !g_interrupted.load();
                               });
      if (!r.ok()) {
        print_diagnostics(r.diagnostics);
        messages.pop_back();
        continue;
      }
      const model::GenerationResult& g = r.value.front();
      std::cout << '\n';
      if (g.finish_reason == "cancelled") std::cerr << "(stopped)\n";
      if (g.finish_reason == "length") std::cerr << "(cut at " << g.ids.size() << " tokens: --max-new-tokens)\n";
      messages.emplace_back("assistant", g.text);
    } catch (const std::exception& e) {
      std::cerr << "odyssey-train chat: error: " << e.what() << '\n';
      messages.pop_back();
    }
  }
}

}  // namespace

int cmd_chat(const Args& a) {
  if (!a.has("model")) {
    std::cerr << "odyssey-train chat: --model is required\n" << command_help(chat_spec());
    return kUsage;
  }
  model::GenerationOptions flags;
  if (!apply_sampling_flags(a, "chat", &flags)) return kUsage;
  std::optional<bool> thinking;
  if (!thinking_flag(a, "chat", &thinking)) return kUsage;
  const bool json = a.has("json");
  auto session = infer::Session::open(session_options(a));
  if (!session.ok()) {
    if (json) emit_error(nullptr, 0, format_all(session.diagnostics));
    print_diagnostics(session.diagnostics);
    return kFailure;
  }
  print_diagnostics(session.diagnostics);
  infer::Session& s = *session.value;
  const model::GenerationOptions defaults = s.defaults();
  flags.eos_ids = defaults.eos_ids;
  flags.max_positions = defaults.max_positions;
  install_interrupt_handler();
  return json ? serve(s, flags, thinking) : terminal(s, flags, thinking, a.value("system"));
}
#endif

}  // namespace odyssey::cli
