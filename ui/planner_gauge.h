// PlannerGauge: core's memory planner drawn as one stacked bar per GPU — the plan's at-peak
// items grouped (model, gradients, optimizer, activations, loss, communication, runtime)
// against the device's capacity, red when the job will not fit — with "largest max_length
// that fits" and "smallest sequence-parallel size that fits". Recomputed on every change
// of the form (a plan takes tens of microseconds). Capacity: the smallest detected GPU the
// config uses (GpuPanel), else the remembered value (an H200 at first); editable in GiB.
#pragma once

#include <QWidget>
#include <optional>

#include "planner/memory_planner.h"

class QDoubleSpinBox;
class QLabel;
class QTableView;

namespace odyssey::ui {

class ConfigForm;
class PlanItemsModel;
class Settings;
class StackedBar;

class PlannerGauge : public QWidget {
  Q_OBJECT
 public:
  PlannerGauge(ConfigForm* form, Settings* settings, QWidget* parent);

  const std::optional<MemoryPlan>& plan() const { return plan_; }
  std::int64_t largest_length() const { return largest_; }
  std::int64_t smallest_sp() const { return smallest_sp_; }
  PlanItemsModel* items() const { return items_; }
  QLabel* headline() const { return headline_; }
  QDoubleSpinBox* capacity() const { return capacity_; }
  PlannerOptions options() const;
  QString host_line() const;

 public slots:
  void recompute();

 private:
  ConfigForm* form_;
  Settings* settings_;
  QLabel* headline_;
  StackedBar* bar_;
  QLabel* answers_;
  QDoubleSpinBox* capacity_;
  QTableView* table_;
  PlanItemsModel* items_;
  std::optional<MemoryPlan> plan_;
  std::int64_t largest_ = 0;
  std::int64_t smallest_sp_ = 0;
};

}  // namespace odyssey::ui
