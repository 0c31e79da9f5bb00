// TrainPage: what the ms-swift web-ui's training page asks first: the model, the training
// files, and the basic hyper-parameters, with a preview of the selected file through the
// chat template and its token lengths. Every editor is a FieldRow on the shared
// ConfigForm, so its tooltip is the field table's help and ms-swift name.
#pragma once

#include <QWidget>

class QComboBox;
class QTableView;

namespace odyssey::ui {

class ConfigForm;
class DatasetListModel;
class DatasetPreview;
class FieldRow;
class ModelPicker;
class Settings;

class TrainPage : public QWidget {
  Q_OBJECT
 public:
  TrainPage(ConfigForm* form, Settings* settings, QWidget* parent);
  DatasetListModel* datasets() const { return datasets_; }
  ModelPicker* model_picker() const { return picker_; }
  DatasetPreview* preview() const { return preview_; }
  QTableView* dataset_table() const { return table_; }
  // "Base weights": 16-bit, 4-bit NF4 or 4-bit FP4 (quant_bits and bnb_4bit_quant_type).
  QComboBox* base_weights() const { return base_weights_; }

 private:
  QWidget* model_group();
  QWidget* data_group();
  QWidget* training_group();
  QWidget* preview_group();
  void add_datasets();
  void update_availability();

  ConfigForm* form_;
  Settings* settings_;
  ModelPicker* picker_ = nullptr;
  DatasetListModel* datasets_ = nullptr;
  QTableView* table_ = nullptr;
  DatasetPreview* preview_ = nullptr;
  void sync_base_weights();

  std::vector<FieldRow*> lora_rows_;
  FieldRow* epochs_ = nullptr;
  QComboBox* base_weights_ = nullptr;
};

}  // namespace odyssey::ui
