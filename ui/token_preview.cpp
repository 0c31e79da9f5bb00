#include "token_preview.h"

#include <QCoreApplication>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "data/dataset.h"
#include "data/tokenize.h"

namespace odyssey::ui {
namespace {

namespace fs = std::filesystem;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// The first error of `d`, formatted; `tmp`, when given, is replaced by `real` (the head copy).
std::string first_error(const Diagnostics& d, const std::string& tmp = {}, const std::string& real = {}) {
  for (const auto& x : d) {
    if (x.severity != Severity::Error) continue;
    std::string s = x.format();
    replace_all(s, tmp, real);
    return s;
  }
  return "failed";
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// Whether the file is a JSON array (its first character after a BOM and whitespace is '['),
// as core decides.
bool is_json_array(std::ifstream& in) {
  char bom[3] = {};
  in.read(bom, 3);
  if (!(in.gcount() == 3 && bom[0] == '\xEF' && bom[1] == '\xBB' && bom[2] == '\xBF')) {
    in.clear();
    in.seekg(0);
  }
  char c = 0;
  while (in.get(c) && (c == ' ' || c == '\t' || c == '\r' || c == '\n')) {}
  const bool array = in && c == '[';
  in.clear();
  in.seekg(0);
  return array;
}

struct Head {
  Result<data::FileData> data;
  bool has_more = false;
};

// The valid samples among the first `max` records of `path`, read with core's rules. A JSON
// Lines file with more records has its head (blank lines kept, so line numbers stay) copied
// to a temporary file that core reads; origins and messages then name the real file.
Head read_head(const std::string& path, std::size_t max, const std::atomic<bool>* cancel) {
  Head h;
  data::LoadOptions lo;
  lo.max_bad_sample_ratio = 1.0;  // preview what is valid; the dataset list reports the rest
  lo.max_listed = 0;
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  const std::string ext = fs::path(path).extension().string();
  if (!fs::is_regular_file(path, ec) || !in || (ext != ".jsonl" && ext != ".json")) {
    h.data = data::read_dataset_file(path, lo);  // core's message (missing, unreadable, extension)
    return h;
  }
  if (is_json_array(in)) {
    const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
    if (size > kMaxPreviewArrayBytes) {
      h.data.diagnostics.push_back({Severity::Error, path, 0, 0, "",
                                    QCoreApplication::translate("TokenPreview",
                                                                "a JSON array of %1 MiB is not previewed (it would be "
                                                                "read whole); JSON Lines files are read from their "
                                                                "first lines")
                                        .arg(size >> 20)
                                        .toStdString()});
      return h;
    }
    h.data = data::read_dataset_file(path, lo);
    if (h.data.ok() && h.data.value.samples.size() > max) {
      h.has_more = true;
      h.data.value.samples.resize(max);
    }
    return h;
  }
  std::string head, line;
  std::size_t records = 0;
  while (std::getline(in, line)) {
    if (cancel && cancel->load()) {
      h.data.diagnostics.push_back({Severity::Error, path, 0, 0, "", "cancelled"});
      return h;
    }
    if (!blank(line)) {
      if (records == max) {
        h.has_more = true;
        break;
      }
      ++records;
    }
    head += line;
    head += '\n';
  }
  if (!h.has_more) {
    h.data = data::read_dataset_file(path, lo);
    return h;
  }
  QTemporaryDir tmp;
  if (!tmp.isValid()) {
    h.data.diagnostics.push_back(
        {Severity::Error, path, 0, 0, "",
         QCoreApplication::translate("TokenPreview", "no temporary folder for the preview").toStdString()});
    return h;
  }
  const std::string copy = tmp.filePath(QStringLiteral("head.jsonl")).toStdString();
  {
    std::ofstream out(copy, std::ios::binary);
    out << head;
    if (!out) {
      h.data.diagnostics.push_back({Severity::Error, copy, 0, 0, "",
                                    QCoreApplication::translate("TokenPreview", "cannot be written").toStdString()});
      return h;
    }
  }
  h.data = data::read_dataset_file(copy, lo);
  for (auto& d : h.data.diagnostics) {
    replace_all(d.file, copy, path);
    replace_all(d.message, copy, path);
  }
  for (auto& s : h.data.value.samples) replace_all(s.origin, copy, path);
  h.data.value.report.path = path;
  return h;
}

}  // namespace

std::vector<PreviewSegment> preview_segments(const Tokenizer& tokenizer, const std::vector<std::int32_t>& ids,
                                             const std::vector<std::int32_t>& labels) {
  std::vector<PreviewSegment> out;
  std::size_t begin = 0;
  const auto trained = [&](std::size_t i) { return i < labels.size() && labels[i] != data::kIgnoreIndex; };
  for (std::size_t i = 1; i <= ids.size(); ++i) {
    if (i < ids.size() && trained(i) == trained(begin)) continue;
    PreviewSegment s;
    s.trained = trained(begin);
    s.text = tokenizer.decode(std::span<const std::int32_t>(ids.data() + begin, i - begin), false);
    out.push_back(std::move(s));
    begin = i;
  }
  return out;
}

TokenPreview build_token_preview(const TokenPreviewRequest& r, const std::atomic<bool>* cancel) {
  TokenPreview p;
  if (r.model_dir.empty()) {
    p.error =
        QCoreApplication::translate("TokenPreview", "no model directory with tokenizer.json is chosen").toStdString();
    return p;
  }
  if (r.tokenizer.valid() && r.tokenizer_dir == r.model_dir) {
    p.tokenizer = r.tokenizer;
  } else {
    std::error_code ec;
    if (!fs::exists(fs::path(r.model_dir) / "tokenizer.json", ec)) {
      p.error = QCoreApplication::translate("TokenPreview", "%1 has no tokenizer.json")
                    .arg(QString::fromStdString(r.model_dir))
                    .toStdString();
      return p;
    }
    auto tok = Tokenizer::load(r.model_dir);
    if (!tok.ok()) {
      p.error = QCoreApplication::translate("TokenPreview", "the tokenizer could not be loaded: %1")
                    .arg(QString::fromStdString(first_error(tok.diagnostics)))
                    .toStdString();
      return p;
    }
    p.tokenizer = tok.value;
  }
  p.tokenizer_dir = r.model_dir;
  auto tmpl = data::template_for(r.template_name, p.tokenizer, r.model_family, r.template_file);
  if (!tmpl.ok()) {
    p.error = QCoreApplication::translate("TokenPreview", "chat template: %1")
                  .arg(QString::fromStdString(first_error(tmpl.diagnostics)))
                  .toStdString();
    return p;
  }
  for (const auto& d : tmpl.diagnostics)
    if (d.severity == Severity::Warning) p.notes.push_back(d.message);
  p.template_name = std::string(tmpl.value.name());

  Head head = read_head(r.dataset_path, r.max_samples, cancel);
  if (!head.data.ok()) {
    p.error = first_error(head.data.diagnostics);
    return p;
  }
  p.file_has_more = head.has_more;
  p.malformed = head.data.value.report.malformed;
  p.records_read = static_cast<std::int64_t>(head.data.value.samples.size());
  if (cancel && cancel->load()) {
    p.error = "cancelled";
    return p;
  }

  data::TokenizeOptions to;
  // Untruncated lengths: the histogram shows what max_length and the truncation strategy cut.
  to.max_length = std::numeric_limits<std::int32_t>::max();
  to.truncation = data::Truncation::Delete;
  to.system = r.system;
  auto tokenized = data::tokenize_samples(head.data.value.samples, p.tokenizer, tmpl.value, to);
  if (!tokenized.ok()) {
    p.error = first_error(tokenized.diagnostics);
    return p;
  }
  p.lengths = std::move(tokenized.value.report.lengths);
  p.without_labels = tokenized.value.report.dropped_no_labels;
  const auto& samples = tokenized.value.samples;
  for (std::size_t i = 0; i < samples.size() && i < r.shown; ++i) {
    PreviewSample s;
    s.origin = samples[i].origin;
    s.tokens = static_cast<std::int64_t>(samples[i].ids.size());
    s.trained_tokens = std::count_if(samples[i].labels.begin(), samples[i].labels.end(),
                                     [](std::int32_t l) { return l != data::kIgnoreIndex; });
    s.segments = preview_segments(p.tokenizer, samples[i].ids, samples[i].labels);
    p.samples.push_back(std::move(s));
  }
  return p;
}

LengthHistogram length_histogram(std::vector<std::int32_t> lengths, std::int64_t max_length, int bins) {
  LengthHistogram h;
  bins = std::max(bins, 1);
  std::sort(lengths.begin(), lengths.end());
  if (!lengths.empty()) {
    h.longest = lengths.back();
    h.median = lengths[(lengths.size() - 1) / 2];
    h.p95 = lengths[static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(lengths.size()))) - 1];
  }
  for (std::int32_t l : lengths)
    if (l > max_length) ++h.over_max;
  // A round width (1, 2, 5 × 10^k) so bin edges read well on the axis.
  const double span = static_cast<double>(std::max<std::int64_t>({h.longest, max_length, 1}));
  const double raw = span / bins;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double width = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    width = m * mag;
    if (width >= raw) break;
  }
  h.bin_width = std::max(1.0, std::round(width));
  h.counts.assign(static_cast<std::size_t>(std::floor(span / h.bin_width)) + 1, 0);
  for (std::int32_t l : lengths) ++h.counts[static_cast<std::size_t>(std::floor(l / h.bin_width))];
  return h;
}

}  // namespace odyssey::ui
