// GpuPanel: the GPUs of this machine (GpuProbe, on the thread pool) with name, memory and
// live utilisation refreshed every two seconds, and check boxes that choose gpu_ids. Without
// NVML or without a GPU it says that training runs on the CPU, and why. The probe's results
// reach the list through set_probe_result(), the same setter tests use to inject GPUs.
#pragma once

#include <QTimer>
#include <QWidget>
#include <memory>

#include "gpu_probe.h"

class QLabel;
class QTableView;

namespace odyssey::ui {

class ConfigForm;
class GpuListModel;

class GpuPanel : public QWidget {
  Q_OBJECT
 public:
  // `probe` null: nothing is probed (the list comes from set_probe_result only).
  GpuPanel(ConfigForm* form, std::shared_ptr<GpuProbe> probe, QWidget* parent);

  void set_probe_result(const GpuProbeResult& r);
  GpuListModel* model() const { return model_; }
  QTableView* table() const { return table_; }
  QLabel* status() const { return status_; }
  // Probes answered so far (tests wait for the first).
  int probes_done() const { return probes_done_; }
  // The smallest memory (GiB) among the GPUs the config uses; 0 without GPUs.
  double capacity_gib() const;
  QTimer* refresh_timer() { return &refresh_; }

 signals:
  // The used GPUs' smallest memory changed (the planner's capacity follows it).
  void capacity_detected(double gib);

 private:
  void probe_now();
  void update_status();

  ConfigForm* form_;
  std::shared_ptr<GpuProbe> probe_;
  GpuListModel* model_;
  QTableView* table_;
  QLabel* status_;
  QTimer refresh_;
  GpuProbeResult last_;
  bool has_result_ = false;
  bool probing_ = false;
  int probes_done_ = 0;
  double last_capacity_ = 0;
};

}  // namespace odyssey::ui
