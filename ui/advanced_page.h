// AdvancedPage: sequence parallelism (the "Enable Ulysses" switch, its size, the Ulysses ×
// ring split and the per-GPU sequence length derived live), kernels and memory policy,
// optimizer memory (ZeRO, GaLore, Q-GaLore), precision, devices, the GPUs of this machine
// (GpuPanel: detected through NVML, checked ones are gpu_ids) and the rest of the keys.
// Invalid combinations show at their field from validate_config's diagnostics.
#pragma once

#include <QWidget>

#include <vector>

class QHBoxLayout;
class QVBoxLayout;

class QCheckBox;
class QComboBox;
class QLabel;

namespace odyssey::ui {

class ConfigForm;
class FieldRow;
class GpuPanel;

class AdvancedPage : public QWidget {
  Q_OBJECT
 public:
  AdvancedPage(ConfigForm* form, QWidget* parent);
  QCheckBox* ulysses_switch() const { return enable_sp_; }
  QComboBox* split_mode() const { return split_; }
  QLabel* derived() const { return derived_; }
  GpuPanel* gpu_panel() const { return gpu_panel_; }

  // The derived-length text for the form's config and model (also used by tests).
  static QString derived_text(const ConfigForm& form);

  // How many columns the groups stand in now (3 where the page is wide enough, else 2 or 1).
  int column_count() const;

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void reflow();
  QHBoxLayout* columns_ = nullptr;
  std::vector<QVBoxLayout*> slots_;  // the page's three columns; the groups' columns stand in them
  std::vector<QWidget*> column_widgets_;
  QWidget* viewport_ = nullptr;
  int columns_count_ = 0;
  QWidget* parallel_group();
  QWidget* group(const QString& title, std::initializer_list<const char*> keys);
  void update();

  ConfigForm* form_;
  QCheckBox* enable_sp_ = nullptr;
  QComboBox* split_ = nullptr;
  QLabel* derived_ = nullptr;
  FieldRow* sp_row_ = nullptr;
  FieldRow* ulysses_row_ = nullptr;
  FieldRow* ep_row_ = nullptr;  // expert_parallel_size: MoE models under sequence parallelism
  std::vector<FieldRow*> galore_rows_;
  std::vector<FieldRow*> quant_rows_;  // the 4-bit settings: available with quant_bits 4
  FieldRow* offload_row_ = nullptr;
  FieldRow* optimizer_dtype_row_ = nullptr;
  // Card presets for gpu_memory_budget_gib: the memory of the cards users train on (24, 32, 48,
  // 80 GiB), so a plan and a run on a larger GPU stand for them.
  QComboBox* card_preset_ = nullptr;
  GpuPanel* gpu_panel_ = nullptr;
  bool updating_ = false;
};

}  // namespace odyssey::ui
