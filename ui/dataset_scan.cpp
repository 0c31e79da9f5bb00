#include "dataset_scan.h"

#include <QCoreApplication>
#include <QString>

#include "data/dataset.h"

namespace odyssey::ui {
namespace {

std::string thousands(std::int64_t v) {
  std::string d = std::to_string(v), out;
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

}  // namespace

DatasetScan scan_dataset(const std::string& path, const std::atomic<bool>* cancel) {
  DatasetScan s;
  if (cancel && cancel->load()) {
    s.error = "cancelled";
    return s;
  }
  // The engine's own reader, so the table counts what training will: a record it cannot
  // convert (no assistant turn, an unknown role) is malformed here too. Every malformed record
  // is counted, not judged: the configuration's max_bad_sample_ratio judges them in the
  // engine's check, shown at the dataset field.
  data::LoadOptions o;
  o.max_bad_sample_ratio = 1.0;
  o.max_listed = 1;
  auto r = data::read_dataset_file(path, o);
  const data::FileReport& rep = r.value.report;
  s.format = rep.format.empty() ? "unknown" : rep.format;
  s.lines = rep.lines;
  s.samples = rep.samples;
  s.broken = rep.malformed;
  for (const auto& d : r.diagnostics)
    if (d.line > 0) {
      s.first_broken_line = d.line;
      break;
    }
  if (!r.ok()) {
    for (const auto& d : r.diagnostics)
      if (d.severity == Severity::Error) {
        s.error = d.message;
        break;
      }
    return s;
  }
  s.ok = true;
  return s;
}

std::string describe_scan(const DatasetScan& s) {
  if (!s.ok) return s.error;
  auto q = [](const std::string& v) { return QString::fromStdString(v); };
  QString out = (s.samples == 1 ? QCoreApplication::translate("DatasetScan", "%1, %2 sample")
                                : QCoreApplication::translate("DatasetScan", "%1, %2 samples"))
                    .arg(q(s.format), q(thousands(s.samples)));
  if (s.broken > 0) {
    out += QCoreApplication::translate("DatasetScan", "; %1 of %2 records malformed")
               .arg(q(thousands(s.broken)), q(thousands(s.lines)));
    if (s.first_broken_line > 0)
      out += QCoreApplication::translate("DatasetScan", " (first at line %1)").arg(s.first_broken_line);
  }
  return out.toStdString();
}

}  // namespace odyssey::ui
