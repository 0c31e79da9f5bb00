#include "data/tokenize.h"

#include <algorithm>
#include <optional>
#include <span>
#include <atomic>
#include <limits>
#include <thread>

#include "common/text.h"

namespace odyssey::data {

namespace {

enum class Fate : std::uint8_t { Kept, Truncated, TooLong, NoLabels, Failed };

struct Slot {
  TokenizedSample sample;
  Fate fate = Fate::Failed;
  std::size_t length = 0;  // before truncation
  Diagnostics errors;
};

bool has_label(const std::vector<std::int32_t>& labels) {
  return std::any_of(labels.begin(), labels.end(), [](std::int32_t l) { return l != kIgnoreIndex; });
}

void process(const Sample& s, const Tokenizer& tok, const ChatTemplate& tpl, const TokenizeOptions& o, Slot& slot) {
  auto r = tokenize_sample(s, tok, tpl, o);
  if (!r.ok()) {
    slot.errors = std::move(r.diagnostics);
    slot.fate = Fate::Failed;
    return;
  }
  slot.sample = std::move(r.value);
  auto& ids = slot.sample.ids;
  auto& labels = slot.sample.labels;
  slot.length = ids.size();
  const auto max = static_cast<std::size_t>(o.max_length);
  slot.fate = Fate::Kept;
  if (ids.size() > max) {
    switch (o.truncation) {
      case Truncation::Delete:
      case Truncation::Raise:
        slot.fate = Fate::TooLong;
        ids = {};
        labels = {};
        return;
      case Truncation::Left: {
        const auto cut = static_cast<std::ptrdiff_t>(ids.size() - max);
        ids.erase(ids.begin(), ids.begin() + cut);
        labels.erase(labels.begin(), labels.begin() + cut);
        break;
      }
      case Truncation::Right:
        ids.resize(max);
        labels.resize(max);
        break;
    }
    slot.fate = Fate::Truncated;
  }
  if (!has_label(labels)) {
    slot.fate = Fate::NoLabels;
    ids = {};
    labels = {};
  }
}

std::string count(std::int64_t n, std::string_view what) {
  return std::to_string(n) + " " + std::string(what) + (n == 1 ? "" : "s");
}

}  // namespace

std::optional<Truncation> parse_truncation(std::string_view s) {
  if (s == "delete") return Truncation::Delete;
  if (s == "left") return Truncation::Left;
  if (s == "right") return Truncation::Right;
  if (s == "raise") return Truncation::Raise;
  return std::nullopt;
}

std::string_view truncation_name(Truncation t) {
  switch (t) {
    case Truncation::Delete: return "delete";
    case Truncation::Left: return "left";
    case Truncation::Right: return "right";
    case Truncation::Raise: return "raise";
  }
  return "";
}

std::string summary(const TokenizeReport& r) {
  std::string s = count(r.samples_in, "sample") + " (" + r.template_name + " template, max_length " +
                  std::to_string(r.max_length) + ", truncation " + r.truncation + "): " + std::to_string(r.kept) +
                  " kept";
  if (r.truncated) s += " (" + std::to_string(r.truncated) + " truncated)";
  if (r.dropped_too_long) s += ", " + std::to_string(r.dropped_too_long) + " dropped as too long";
  if (r.dropped_no_labels) s += ", " + std::to_string(r.dropped_no_labels) + " dropped without a label token";
  s += "; " + count(r.total_tokens, "token") + ", " + std::to_string(r.label_tokens) + " trained";
  if (!r.lengths.empty()) {
    const auto [mn, mx] = std::minmax_element(r.lengths.begin(), r.lengths.end());
    s += ", lengths " + std::to_string(*mn) + ".." + std::to_string(*mx);
  }
  return s;
}

Result<TokenizedSample> tokenize_sample(const Sample& sample, const Tokenizer& tokenizer,
                                        const ChatTemplate& chat_template, const TokenizeOptions& options) {
  Result<TokenizedSample> r;
  r.value.origin = sample.origin;
  const std::vector<ChatMessage>* messages = &sample.messages;
  std::vector<ChatMessage> with_system;
  if (!options.system.empty() && (sample.messages.empty() || sample.messages[0].role != "system")) {
    with_system.reserve(sample.messages.size() + 1);
    with_system.push_back({"system", options.system, {}});
    with_system.insert(with_system.end(), sample.messages.begin(), sample.messages.end());
    messages = &with_system;
  }
  ChatOptions chat = options.chat;
  chat.tools = sample.tools;
  auto enc = chat_template.encode(tokenizer, *messages, chat);
  if (!enc.ok()) {
    for (auto& d : enc.diagnostics) {
      if (d.severity != Severity::Error) continue;
      d.file = sample.origin;
      r.diagnostics.push_back(std::move(d));
    }
    if (r.diagnostics.empty())
      r.diagnostics.push_back(diagnostic_at(Severity::Error, sample.origin, {}, "cannot be tokenized"));
    return r;
  }
  r.value.ids = std::move(enc.value.ids);
  if (options.train_on_all) {
    r.value.labels = r.value.ids;
  } else {
    r.value.labels.assign(r.value.ids.size(), kIgnoreIndex);
    const auto open = options.ignore_empty_think ? tokenizer.token_to_id("<think>") : std::nullopt;
    const auto close = options.ignore_empty_think ? tokenizer.token_to_id("</think>") : std::nullopt;
    const auto& ids = r.value.ids;
    auto blank = [&](std::size_t i) {  // a token that decodes to whitespace only
      const std::string t = tokenizer.decode(std::span<const std::int32_t>(&ids[i], 1));
      return !t.empty() && t.find_first_not_of(" \t\r\n") == std::string::npos;
    };
    for (const auto& [b, e0] : enc.value.assistant_spans) {
      const std::size_t e = std::min(e0, ids.size());
      std::size_t from = b;
      if (open && close && b < e && ids[b] == *open) {
        std::size_t k = b + 1;
        while (k < e && blank(k)) ++k;
        if (k < e && ids[k] == *close) {
          ++k;
          while (k < e && blank(k)) ++k;
          from = k;  // the empty think block and the whitespace after it stay untrained
        }
      }
      for (std::size_t i = from; i < e; ++i) r.value.labels[i] = ids[i];
    }
  }
  return r;
}

Result<TokenizedDataset> tokenize_samples(const std::vector<Sample>& samples, const Tokenizer& tokenizer,
                                          const ChatTemplate& chat_template, const TokenizeOptions& options) {
  Result<TokenizedDataset> r;
  auto& rep = r.value.report;
  rep.template_name = std::string(chat_template.name());
  rep.max_length = options.max_length;
  rep.truncation = std::string(truncation_name(options.truncation));
  rep.samples_in = static_cast<std::int64_t>(samples.size());
  if (options.max_length < 1 || options.max_length > std::numeric_limits<std::int32_t>::max()) {
    r.diagnostics.push_back(
        diagnostic_at(Severity::Error, "", "max_length",
                      "found " + std::to_string(options.max_length) + "; expected a positive token count"));
    return r;
  }
  if (!tokenizer.valid()) {
    r.diagnostics.push_back(diagnostic_at(Severity::Error, "", "model", "no tokenizer loaded"));
    return r;
  }

  if (options.on_start) options.on_start(samples.size());
  std::vector<Slot> slots(samples.size());
  constexpr std::size_t kBlock = 32;
  const std::size_t blocks = (samples.size() + kBlock - 1) / kBlock;
  unsigned threads = options.threads > 0 ? static_cast<unsigned>(options.threads)
                                         : std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(blocks, 1)));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> cancelled{false};
  auto work = [&] {
    for (;;) {
      if (cancelled.load(std::memory_order_relaxed)) return;
      if (options.cancelled && options.cancelled()) {
        cancelled.store(true);
        return;
      }
      const std::size_t b = next.fetch_add(1);
      if (b >= blocks) return;
      const std::size_t end = std::min(samples.size(), (b + 1) * kBlock);
      for (std::size_t i = b * kBlock; i < end; ++i) process(samples[i], tokenizer, chat_template, options, slots[i]);
    }
  };
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads - 1);
    try {
      for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
    } catch (const std::exception&) {
      // No more threads: the ones started and this one finish the work.
    }
    work();
    for (auto& t : pool) t.join();
  }

  if (cancelled.load()) {
    r.diagnostics.push_back(
        diagnostic_at(Severity::Error, "", {},
                      "tokenization was cancelled (a stop was requested) after " +
                          std::to_string(std::min(samples.size(), std::min(next.load(), blocks) * kBlock)) + " of " +
                          std::to_string(samples.size()) + " samples"));
    return r;
  }
  // Merge in input order: every count and choice below is independent of the thread count.
  const Slot* first_too_long = nullptr;
  const Slot* first_no_labels = nullptr;
  std::size_t failed = 0;
  r.value.samples.reserve(samples.size());
  for (Slot& s : slots) {
    switch (s.fate) {
      case Fate::Failed:
        if (failed++ < 10) r.diagnostics.insert(r.diagnostics.end(), s.errors.begin(), s.errors.end());
        continue;
      case Fate::TooLong:
        if (!first_too_long) first_too_long = &s;
        ++rep.dropped_too_long;
        continue;
      case Fate::NoLabels:
        if (!first_no_labels) first_no_labels = &s;
        ++rep.dropped_no_labels;
        continue;
      case Fate::Truncated: ++rep.truncated; break;
      case Fate::Kept: break;
    }
    ++rep.kept;
    rep.total_tokens += static_cast<std::int64_t>(s.sample.ids.size());
    rep.label_tokens +=
        std::count_if(s.sample.labels.begin(), s.sample.labels.end(), [](std::int32_t l) { return l != kIgnoreIndex; });
    rep.lengths.push_back(static_cast<std::int32_t>(s.sample.ids.size()));
    r.value.samples.push_back(std::move(s.sample));
  }
  if (failed > 10)
    r.diagnostics.push_back(
        diagnostic_at(Severity::Note, "", {}, "... and " + std::to_string(failed - 10) + " more samples failed"));
  if (first_too_long) {
    const std::string what = first_too_long->sample.origin + " has " + std::to_string(first_too_long->length) +
                             " tokens, more than max_length " + std::to_string(options.max_length);
    if (options.truncation == Truncation::Raise) {
      r.diagnostics.push_back(diagnostic_at(
          Severity::Error, "", "truncation_strategy",
          what + " (truncation_strategy raise; " + std::to_string(rep.dropped_too_long) + " sample(s) are too long)"));
    } else {
      r.diagnostics.push_back(diagnostic_at(Severity::Warning, "", "max_length",
                                            "dropped " + count(rep.dropped_too_long, "sample") +
                                                " longer than max_length " + std::to_string(options.max_length) +
                                                " (truncation_strategy delete); the first: " + what));
    }
  }
  if (first_no_labels)
    r.diagnostics.push_back(diagnostic_at(
        Severity::Warning, "", "truncation_strategy",
        "dropped " + count(rep.dropped_no_labels, "sample") + " with no token to train on (no assistant token left" +
            (options.truncation == Truncation::Right ? " after right truncation" : "") +
            "); the first: " + first_no_labels->sample.origin));
  if (!has_errors(r.diagnostics) && rep.samples_in > 0 && rep.kept == 0)
    r.diagnostics.push_back(diagnostic_at(Severity::Error, "", {}, "no sample is left to train on after tokenization"));
  if (!r.ok()) {
    r.value.samples.clear();
  }
  return r;
}

Result<ChatTemplate> template_for(const std::string& template_name, const Tokenizer& tokenizer,
                                  std::string_view model_family, const std::string& template_file) {
  Result<ChatTemplate> r;
  const std::string bos = tokenizer.valid() ? tokenizer.bos_token() : std::string();
  if (!template_file.empty()) {
    if (template_name != "auto") {
      r.diagnostics.push_back(
          diagnostic_at(Severity::Error, "", "template",
                        "found " + text::quoted(template_name) +
                            " with template_file set; a template file replaces the model's template, so "
                            "template must be auto"));
      return r;
    }
    r = chat_template_from_file(template_file, tokenizer);
    if (!r.ok()) return r;
  } else if (template_name == "auto") {
    r = chat_template_for_model(tokenizer, model_family);
    if (!r.ok()) return r;
  } else {
    const std::optional<ChatTemplateKind> kind = chat_template_kind_named(template_name);
    if (!kind) {
      r.diagnostics.push_back(diagnostic_at(
          Severity::Error, "", "template",
          "found " + text::quoted(template_name) + "; expected auto, chatml, qwen2_5, qwen3, llama3 or llama3_1"));
      return r;
    }
    r.value = ChatTemplate(*kind, bos);
    if (tokenizer.valid()) {
      const auto own = recognize_chat_template(tokenizer.chat_template_source());
      if (own && *own != *kind)
        r.diagnostics.push_back(diagnostic_at(Severity::Warning, tokenizer.chat_template_file(), "template",
                                              "the model's own chat template is " +
                                                  std::string(ChatTemplate(*own).name()) + "; training with " +
                                                  std::string(r.value.name()) + " as configured"));
    }
  }
  if (!tokenizer.valid()) {
    r.diagnostics.push_back(diagnostic_at(Severity::Error, "", "model", "no tokenizer loaded"));
    return r;
  }
  std::vector<std::string> needed;
  switch (r.value.kind()) {
    case ChatTemplateKind::Qwen2_5:
    case ChatTemplateKind::Qwen3:
    case ChatTemplateKind::ChatML: needed = {"<|im_start|>", "<|im_end|>"}; break;
    case ChatTemplateKind::Llama3:
    case ChatTemplateKind::Llama3_1:
      needed = {bos.empty() ? std::string("<|begin_of_text|>") : bos, "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"};
      break;
    case ChatTemplateKind::Jinja: break;  // the model's own template: its tokens are the tokenizer's
  }
  for (const auto& t : needed)
    if (!tokenizer.token_to_id(t))
      r.diagnostics.push_back(diagnostic_at(Severity::Error, tokenizer.file(), "template",
                                            "the " + std::string(r.value.name()) + " template needs the token " +
                                                text::quoted(t) + ", which this tokenizer does not have"));
  return r;
}

}  // namespace odyssey::data
