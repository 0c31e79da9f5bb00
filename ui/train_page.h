// TrainPage: what the ms-swift web-ui's training page asks first: the model, the training
// files, and the basic hyper-parameters, with a preview of the selected file through the
// chat template and its token lengths. Every editor is a FieldRow on the shared
// ConfigForm, so its tooltip is the field table's help and ms-swift name.
#pragma once

#include <QWidget>

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
  std::vector<FieldRow*> lora_rows_;
  FieldRow* epochs_ = nullptr;
};

}  // namespace odyssey::ui
