// Chat templates against transformers' apply_chat_template with the models' real Jinja
// templates (Qwen2.5, Qwen3, Llama-3, Llama-3.1): identical text, identical ids, and the
// assistant spans equal to return_assistant_tokens_mask over a {% generation %}-marked copy
// of each template (tests/reference/make_tokenizer_fixtures.py).
#include <QtTest>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace odyssey;
using nlohmann::json;

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
  if (!QDir().rename(tmp, dir)) QDir(tmp).removeRecursively();
  return dir;
}

std::vector<ChatMessage> messages_of(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>(), {}});
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> spans_of(const json& j) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const json& s : j) out.emplace_back(s[0].get<std::size_t>(), s[1].get<std::size_t>());
  return out;
}

std::vector<ChatMessage> conversation() {
  return {{"system", "Be brief.", {}}, {"user", "Hi", {}}, {"assistant", "Hello!", {}}};
}

}  // namespace

class TstChatTemplate : public QObject {
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
      std::ifstream in((dir_ + "/expected.json").toStdString());
      expected_ = json::parse(in);
    }
  }

 private slots:
  void parity();
  void recognizesTheModelsTemplates();
  void families();
  void spanRule();
  void qwen3Thinking();
  void refusals();
  void brokenToolUseTemplateIsAnError();
};

void TstChatTemplate::parity() {
  need_fixtures();
  std::map<std::string, Tokenizer> tokenizers;
  int n = 0, spans = 0;
  for (const json& c : expected_["chat"]) {
    const std::string model = c["model"].get<std::string>();
    if (!tokenizers.count(model)) {
      auto r = Tokenizer::load((dir_ + "/").toStdString() + model);
      QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
      tokenizers[model] = r.value;
    }
    const Tokenizer& tok = tokenizers[model];
    auto tpl = chat_template_for_model(tok, "");
    QVERIFY2(tpl.ok(), format_all(tpl.diagnostics).c_str());
    QCOMPARE(std::string(tpl.value.name()), c["template"].get<std::string>());
    ChatOptions o;
    o.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (c["kwargs"].contains("enable_thinking")) o.enable_thinking = c["kwargs"]["enable_thinking"].get<bool>();
    const auto msgs = messages_of(c["messages"]);
    const auto text = tpl.value.render(msgs, o);
    QVERIFY(text.ok());
    QCOMPARE(text.value.text, c["text"].get<std::string>());
    const auto enc = tpl.value.encode(tok, msgs, o);
    QVERIFY2(enc.ok(), format_all(enc.diagnostics).c_str());
    QCOMPARE(enc.value.ids, c["ids"].get<std::vector<std::int32_t>>());
    if (c.contains("assistant_spans")) {
      QCOMPARE(enc.value.assistant_spans, spans_of(c["assistant_spans"]));
      spans += static_cast<int>(enc.value.assistant_spans.size());
    }
    ++n;
  }
  QVERIFY(n > 40);
  qInfo("%d conversations: text, ids and %d assistant spans identical to transformers %s", n, spans,
        expected_["versions"]["transformers"].get<std::string>().c_str());
}

void TstChatTemplate::recognizesTheModelsTemplates() {
  need_fixtures();
  const std::pair<const char*, ChatTemplateKind> cases[] = {{"qwen2_5", ChatTemplateKind::Qwen2_5},
                                                            {"qwen3", ChatTemplateKind::Qwen3},
                                                            {"llama3", ChatTemplateKind::Llama3},
                                                            {"llama3_1", ChatTemplateKind::Llama3_1}};
  for (const auto& [dir, kind] : cases) {
    auto t = Tokenizer::load((dir_ + "/").toStdString() + dir);
    QVERIFY(t.ok());
    QCOMPARE(recognize_chat_template(t.value.chat_template_source()), std::optional<ChatTemplateKind>(kind));
    QVERIFY(!t.value.chat_template_file().empty());
  }
  // A model without a template falls back to its family's, with a note.
  auto g = Tokenizer::load((dir_ + "/gpt2").toStdString());
  QVERIFY(g.ok());
  auto t = chat_template_for_model(g.value, "qwen3");
  QVERIFY(t.ok());
  QCOMPARE(t.value.kind(), ChatTemplateKind::Qwen3);
  QCOMPARE(t.diagnostics.size(), std::size_t{1});
  QVERIFY(!chat_template_for_model(g.value, "gpt2").ok());
}

void TstChatTemplate::families() {
  QCOMPARE(chat_template_for_family("qwen2").value.kind(), ChatTemplateKind::Qwen2_5);
  QCOMPARE(chat_template_for_family("qwen3").value.kind(), ChatTemplateKind::Qwen3);
  QCOMPARE(chat_template_for_family("llama3").value.kind(), ChatTemplateKind::Llama3_1);
  auto r = chat_template_for_family("mistral");
  QVERIFY(!r.ok());
  QVERIFY(format_all(r.diagnostics).find("built in for: qwen2, qwen3, llama3") != std::string::npos);
  QVERIFY(!recognize_chat_template("{{ messages }}").has_value());
  // Fingerprints are not enough: a ChatML template that is not Qwen2.5's is refused.
  QVERIFY(!recognize_chat_template("<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                                   "assistant.<|im_end|> {% for m in messages %}{{ m.content }}{% endfor %}")
               .has_value());
  need_fixtures();
  auto llama = Tokenizer::load((dir_ + "/llama3_1").toStdString());
  QVERIFY(llama.ok());
  std::string jinja = llama.value.chat_template_source();
  QVERIFY(recognize_chat_template(jinja).has_value());
  // Llama-3.2 puts today's date (strftime_now) in the prompt: not reproducible, not recognized.
  jinja.insert(0, "{%- if strftime_now is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- endif %}");
  QVERIFY(!recognize_chat_template(jinja).has_value());
}

void TstChatTemplate::spanRule() {
  // The trained part of an assistant turn: its content and its end-of-turn token, not the
  // header before it nor the newline after it.
  const auto qwen = ChatTemplate(ChatTemplateKind::Qwen2_5).render(conversation()).value;
  QCOMPARE(qwen.assistant_ranges.size(), std::size_t{1});
  const auto [b, e] = qwen.assistant_ranges[0];
  QCOMPARE(qwen.text.substr(b, e - b), std::string("Hello!<|im_end|>"));
  QCOMPARE(qwen.text.substr(e), std::string("\n"));
  const auto llama = ChatTemplate(ChatTemplateKind::Llama3_1).render(conversation()).value;
  const auto [lb, le] = llama.assistant_ranges.at(0);
  QCOMPARE(llama.text.substr(lb, le - lb), std::string("Hello!<|eot_id|>"));
  QVERIFY(llama.text.find("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.") !=
          std::string::npos);
  ChatEncoding enc;
  enc.ids = {1, 2, 3, 4, 5};
  enc.assistant_spans = {{1, 3}, {4, 5}};
  QCOMPARE(enc.assistant_mask(), (std::vector<std::uint8_t>{0, 1, 1, 0, 1}));
}

void TstChatTemplate::qwen3Thinking() {
  const ChatTemplate t(ChatTemplateKind::Qwen3);
  std::vector<ChatMessage> m = {{"user", "q", {}}, {"assistant", "a", {}}};
  QCOMPARE(t.render(m).value.text,
           std::string("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na<|im_end|>\n"));
  m[1].reasoning_content = "because";
  QCOMPARE(t.render(m).value.text, std::string("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n"
                                               "because\n</think>\n\na<|im_end|>\n"));
  ChatOptions o;
  o.add_generation_prompt = true;
  o.enable_thinking = false;
  QCOMPARE(t.render({{"user", "q", {}}}, o).value.text,
           std::string("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

void TstChatTemplate::refusals() {
  const ChatTemplate t(ChatTemplateKind::Qwen2_5);
  // A tool result needs the model's own template (the built-in variant alone has none).
  auto r = t.render({{"tool", "{}", {}}});
  QVERIFY(!r.ok());
  QVERIFY(format_all(r.diagnostics).find("messages: the conversation uses tools") != std::string::npos);
  QVERIFY(format_all(r.diagnostics).find("built-in qwen2_5 template does not render") != std::string::npos);
  r = t.render({{"robot", "hi", {}}});
  QVERIFY(!r.ok());
  QVERIFY(format_all(r.diagnostics).find("messages[0].role: role 'robot' is not supported") != std::string::npos);
  QVERIFY(!t.render({}).ok());
  r = t.render({{"user", "bad \xC3", {}}});
  QVERIFY(format_all(r.diagnostics).find("messages[0].content: invalid UTF-8 at byte offset 4") != std::string::npos);
}

// tokenizer_config.json's named templates: a "tool_use" template that does not parse is an
// error at load, also for a model whose default template Odyssey renders with a built-in
// variant (Qwen2.5's here); before, the error was dropped there and conversations with tools
// silently took the default template.
void TstChatTemplate::brokenToolUseTemplateIsAnError() {
  need_fixtures();
  QTemporaryDir tmp;
  QVERIFY(tmp.isValid());
  const std::string src = (dir_ + "/qwen2_5/").toStdString(), dst = tmp.path().toStdString() + "/";
  QVERIFY(QFile::copy(QString::fromStdString(src + "tokenizer.json"), QString::fromStdString(dst + "tokenizer.json")));
  std::ifstream cfg_in(src + "tokenizer_config.json"), tpl_in(src + "chat_template.jinja");
  json cfg = json::parse(cfg_in);
  const std::string def((std::istreambuf_iterator<char>(tpl_in)), std::istreambuf_iterator<char>());
  auto write = [&](const std::string& tool_use) {
    cfg["chat_template"] =
        json::array({{{"name", "default"}, {"template", def}}, {{"name", "tool_use"}, {"template", tool_use}}});
    std::ofstream(dst + "tokenizer_config.json") << cfg.dump();
    auto tok = Tokenizer::load(dst);
    if (!tok.ok()) qFatal("%s", format_all(tok.diagnostics).c_str());
    return chat_template_for_model(tok.value, "");
  };
  // Parsable: the built-in variant renders the default template, the engine keeps tool_use.
  auto good = write("{{ 'tools: ' ~ tools | length }}{% for m in messages %}{{ m.content }}{% endfor %}");
  QVERIFY2(good.ok(), format_all(good.diagnostics).c_str());
  QCOMPARE(good.value.kind(), ChatTemplateKind::Qwen2_5);
  ChatOptions o;
  o.tools = R"([{"type": "function", "function": {"name": "f"}}])";
  const auto with_tools = good.value.render({{"user", "hi", {}}}, o);
  QVERIFY2(with_tools.ok(), format_all(with_tools.diagnostics).c_str());
  QCOMPARE(with_tools.value.text, std::string("tools: 1hi"));
  // Broken: an error naming the tool_use template and where in it.
  auto bad = write("{% for m in messages %}{{ m.content }}");
  QVERIFY(!bad.ok());
  const std::string e = format_all(bad.diagnostics);
  QVERIFY2(e.find("[tool_use]") != std::string::npos && e.find("chat_template") != std::string::npos, e.c_str());
}

QTEST_APPLESS_MAIN(TstChatTemplate)
#include "tst_chat_template.moc"
