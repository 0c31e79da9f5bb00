// ConfigForm, FieldRow, the pages' special widgets, the dataset scan and the item models.
#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QTemporaryDir>
#include <QSpinBox>
#include <QTest>
#include <fstream>

#include "advanced_page.h"
#include "config/swift_bridge.h"
#include "config/validate.h"
#include "config_form.h"
#include "dataset_model.h"
#include "dataset_scan.h"
#include "field_row.h"
#include "plan_items_model.h"
#include "planner/memory_planner.h"
#include "settings.h"
#include "train_page.h"

using namespace odyssey;
using namespace odyssey::ui;

namespace {

QString preset_path(const char* name) { return QStringLiteral(ODYSSEY_SOURCE_DIR "/presets/") + QLatin1String(name); }

FieldRow* row(QWidget* page, const char* key) {
  return page->findChild<FieldRow*>(QStringLiteral("field:") + QLatin1String(key));
}

void write(const QString& path, const std::string& text) {
  std::ofstream(path.toStdString(), std::ios::binary) << text;
}

}  // namespace

class TstConfigForm : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void starts_with_the_quickstart() {
    ConfigForm form;
    QCOMPARE(form.config(), load_embedded_quickstart().value.config);
    QTRY_VERIFY(!form.model_pending());
    QVERIFY(form.model());
    QCOMPARE(form.model()->architecture, std::string("Qwen2ForCausalLM"));
    QVERIFY2(!form.has_errors(), format_all(form.diagnostics()).c_str());
  }

  // Typing into the pages' fields gives the preset core would write for the same values.
  void filling_the_form_gives_the_expected_yaml() {
    ConfigForm form;
    Settings settings(tmp_.filePath(QStringLiteral("s.ini")));
    TrainPage train(&form, &settings, nullptr);
    AdvancedPage adv(&form, nullptr);
    row(&train, "lora_rank")->set_shown_text(QStringLiteral("32"));
    row(&train, "learning_rate")->set_shown_text(QStringLiteral("3e-4"));
    row(&train, "target_modules")->set_shown_text(QStringLiteral("q_proj, v_proj"));
    row(&train, "output_dir")->set_shown_text(QStringLiteral("runs/my run"));
    row(&train, "system")->set_shown_text(QStringLiteral("Answer: \"briefly\""));
    row(&adv, "seed")->set_shown_text(QStringLiteral("7"));
    row(&adv, "activation_checkpointing")->set_shown_text(QStringLiteral("every:2"));
    row(&adv, "lr_scheduler_type")->set_shown_text(QStringLiteral("linear"));
    TrainConfig expect = load_embedded_quickstart().value.config;
    expect.lora_rank = 32;
    expect.learning_rate = 3e-4;
    expect.target_modules = {"q_proj", "v_proj"};
    expect.output_dir = "runs/my run";
    expect.system = "Answer: \"briefly\"";
    expect.seed = 7;
    expect.activation_checkpointing = "every:2";
    expect.lr_scheduler_type = "linear";
    QCOMPARE(form.config(), expect);
    QCOMPARE(QString::fromStdString(form.preset_text()), QString::fromStdString(save_preset_text(expect, true)));
    QVERIFY(form.modified());
  }

  void every_key_has_an_editor() {
    ConfigForm form;
    Settings settings(tmp_.filePath(QStringLiteral("s.ini")));
    TrainPage train(&form, &settings, nullptr);
    AdvancedPage adv(&form, nullptr);
    for (const auto& f : train_config_fields()) {
      const QString name = QStringLiteral("field:") + QString::fromStdString(std::string(f.key));
      const bool found = train.findChild<FieldRow*>(name) || adv.findChild<FieldRow*>(name);
      QVERIFY2(found, name.toUtf8().constData());
    }
  }

  void every_bundled_preset_fills_the_form_and_round_trips() {
    const QStringList names = QDir(QStringLiteral(ODYSSEY_SOURCE_DIR "/presets")).entryList({QStringLiteral("*.yaml")});
    QVERIFY(names.size() >= 5);
    ConfigForm form;
    Settings settings(tmp_.filePath(QStringLiteral("s.ini")));
    TrainPage train(&form, &settings, nullptr);
    AdvancedPage adv(&form, nullptr);
    for (const QString& n : names) {
      const QString path = preset_path(n.toUtf8().constData());
      auto direct = load_preset_file(path.toStdString());
      QVERIFY(direct.ok());
      QVERIFY(!has_errors(form.load_file(path)));
      QCOMPARE(form.config(), direct.value.config);
      QVERIFY(!form.modified());
      // Every editor shows the value: re-committing what each shows changes nothing.
      for (FieldRow* r : train.findChildren<FieldRow*>() + adv.findChildren<FieldRow*>()) {
        if (r->key() == "dataset") continue;  // edited through the table
        r->set_shown_text(r->shown_text());
        QVERIFY2(form.config() == direct.value.config, (n.toStdString() + ": " + r->key()).c_str());
      }
      QCOMPARE(QString::fromStdString(form.preset_text()),
               QString::fromStdString(save_preset_text(direct.value.config, true)));
      // Saved beside the original (same folder, so relative paths stay), it loads back equal.
      const QString copy = QFileInfo(path).absolutePath() + QStringLiteral("/.tst-roundtrip-") + n;
      QVERIFY(!has_errors(form.save_file(copy)));
      auto again = load_preset_file(copy.toStdString());
      QFile::remove(copy);
      QVERIFY(again.ok());
      QCOMPARE(again.value.config, direct.value.config);
    }
    QVERIFY(!has_errors(form.load_file(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml"))));
    QCOMPARE(row(&adv, "sequence_parallel_size")->shown_text(), QStringLiteral("2"));
    QCOMPARE(row(&adv, "gpu_ids")->shown_text(), QStringLiteral("0, 1"));
    QCOMPARE(row(&train, "lora_rank")->shown_text(), QStringLiteral("16"));
  }

  void saving_elsewhere_rebases_relative_paths() {
    ConfigForm form;
    QVERIFY(!has_errors(form.load_file(preset_path("quickstart.yaml"))));
    const QString out = tmp_.filePath(QStringLiteral("sub/q.yaml"));
    QDir().mkpath(tmp_.filePath(QStringLiteral("sub")));
    QVERIFY(!has_errors(form.save_file(out)));
    QCOMPARE(form.file(), QFileInfo(out).absoluteFilePath());
    QTRY_VERIFY(!form.model_pending());
    QVERIFY2(form.model(), form.model_problem().toUtf8().constData());  // the model is still found
    auto r = check_config(load_preset_file(out.toStdString()).value, true);
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  }

  // Issue 23, finding 9: saved into a folder, the dataset paths came out relative and the
  // model (picked with Browse…) absolute. Now one rule for all: relative under the preset's
  // folder or its parent, absolute elsewhere, however each was entered.
  void saved_paths_follow_one_rule() {
    QDir root(tmp_.filePath(QStringLiteral("project")));
    QVERIFY(root.mkpath(QStringLiteral("presets")) && root.mkpath(QStringLiteral("data")));
    const QString src = QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/quickstart");
    QVERIFY(QFile::copy(src + QStringLiteral("/data/train.jsonl"), root.filePath(QStringLiteral("data/train.jsonl"))));
    QVERIFY(QFile::copy(src + QStringLiteral("/data/val.jsonl"), root.filePath(QStringLiteral("presets/val.jsonl"))));
    ConfigForm form;
    // The model picked with Browse… (absolute, outside the project), the data typed in both forms.
    QVERIFY(form.set_text("model", (QLatin1Char('"') + src + QStringLiteral("/model\"")).toStdString()).empty());
    QVERIFY(
        form.set_text("dataset", ("[\"" + root.filePath(QStringLiteral("data/train.jsonl")) + "#50\"]").toStdString())
            .empty());
    QVERIFY(
        form.set_text("val_dataset", ("[\"" + root.filePath(QStringLiteral("presets/val.jsonl")) + "\"]").toStdString())
            .empty());
    const QString out = root.filePath(QStringLiteral("presets/mine.yaml"));
    QVERIFY(!has_errors(form.save_file(out)));
    auto saved = load_preset_file(out.toStdString());
    QVERIFY(saved.ok());
    const TrainConfig& c = saved.value.config;
    QCOMPARE(QString::fromStdString(c.model),
             QFileInfo(src + QStringLiteral("/model")).canonicalFilePath());  // elsewhere
    QCOMPARE(c.dataset, std::vector<std::string>{"../data/train.jsonl#50"});  // beside
    QCOMPARE(c.val_dataset, std::vector<std::string>{"val.jsonl"});           // inside
    // Saved two folders down, both data files are beyond its parent: absolute.
    QVERIFY(root.mkpath(QStringLiteral("presets/deep/er")));
    QVERIFY(!has_errors(form.save_file(root.filePath(QStringLiteral("presets/deep/er/x.yaml")))));
    auto deeper = load_preset_file(root.filePath(QStringLiteral("presets/deep/er/x.yaml")).toStdString());
    QVERIFY(deeper.ok());
    QCOMPARE(QString::fromStdString(deeper.value.config.dataset.front()),
             QFileInfo(root.filePath(QStringLiteral("data/train.jsonl"))).canonicalFilePath() + QStringLiteral("#50"));
    QCOMPARE(QString::fromStdString(deeper.value.config.val_dataset.front()),
             QFileInfo(root.filePath(QStringLiteral("presets/val.jsonl"))).canonicalFilePath());
  }

  void invalid_inputs_show_at_their_field() {
    ConfigForm form;
    Settings settings(tmp_.filePath(QStringLiteral("s.ini")));
    TrainPage train(&form, &settings, nullptr);
    AdvancedPage adv(&form, nullptr);
    const TrainConfig before = form.config();
    FieldRow* lr = row(&train, "learning_rate");
    lr->set_shown_text(QStringLiteral("fast"));
    QVERIFY(lr->shows_error());
    QVERIFY(!lr->problem_text().isEmpty());
    QCOMPARE(lr->shown_text(), QStringLiteral("fast"));  // the entry stays beside its error
    QCOMPARE(form.config(), before);
    lr->set_shown_text(QStringLiteral("0.001"));
    QVERIFY(!lr->shows_error());
    // Cross-field: offload without ZeRO is marked at offload_optimizer, not elsewhere.
    QVERIFY(!has_errors(form.set_text("offload_optimizer", "true")));
    QVERIFY(row(&adv, "offload_optimizer")->shows_error());
    QVERIFY(row(&adv, "offload_optimizer")->problem_text().contains(QStringLiteral("zero_stage")));
    QVERIFY(!row(&adv, "zero_stage")->shows_error());
    row(&adv, "zero_stage")->set_shown_text(QStringLiteral("1"));
    QVERIFY(!row(&adv, "offload_optimizer")->problem_text().contains(QStringLiteral("zero_stage")));
    row(&adv, "device")->set_shown_text(QStringLiteral("cuda"));  // the quickstart runs on the CPU
    QVERIFY(!row(&adv, "offload_optimizer")->shows_error());
    // Sequence parallel size against the process count and max_length's padding rule.
    row(&adv, "sequence_parallel_size")->set_shown_text(QStringLiteral("3"));
    QVERIFY(row(&adv, "sequence_parallel_size")->shows_error());
    QVERIFY(form.has_errors());
  }

  void switching_tuner_stashes_lora_settings() {
    ConfigForm form;
    Settings settings(tmp_.filePath(QStringLiteral("s.ini")));
    TrainPage train(&form, &settings, nullptr);
    QVERIFY(!has_errors(form.load_file(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml"))));
    QVERIFY(row(&train, "lora_rank")->editor()->isEnabled());
    row(&train, "tuner_type")->set_shown_text(QStringLiteral("full"));
    QVERIFY(!row(&train, "lora_rank")->editor()->isEnabled());
    QCOMPARE(form.config().lora_rank, TrainConfig{}.lora_rank);
    QVERIFY2(!form.has_errors(), format_all(form.diagnostics()).c_str());
    QVERIFY(!QString::fromStdString(form.preset_text()).contains(QStringLiteral("lora_rank")));
    row(&train, "tuner_type")->set_shown_text(QStringLiteral("lora"));
    QCOMPARE(form.config().lora_rank, std::int64_t{16});
    QVERIFY(!form.modified());
  }

  void four_bit_settings_follow_quant_bits() {
    // QLoRA's settings apply with quant_bits 4 only: greyed and stashed at 0 (a preset never
    // carries a 4-bit setting that validation would call unused), restored at 4.
    ConfigForm form;
    AdvancedPage adv(&form, nullptr);
    QVERIFY(!row(&adv, "bnb_4bit_quant_type")->editor()->isEnabled());
    row(&adv, "quant_bits")->set_shown_text(QStringLiteral("4"));
    QVERIFY(row(&adv, "bnb_4bit_quant_type")->editor()->isEnabled());
    row(&adv, "bnb_4bit_quant_type")->set_shown_text(QStringLiteral("fp4"));
    QCOMPARE(form.config().bnb_4bit_quant_type, std::string("fp4"));
    QVERIFY(QString::fromStdString(form.preset_text()).contains(QStringLiteral("bnb_4bit_quant_type: fp4")));
    row(&adv, "quant_bits")->set_shown_text(QStringLiteral("0"));
    QVERIFY(!row(&adv, "bnb_4bit_quant_type")->editor()->isEnabled());
    QCOMPARE(form.config().bnb_4bit_quant_type, TrainConfig{}.bnb_4bit_quant_type);
    QVERIFY(!QString::fromStdString(form.preset_text()).contains(QStringLiteral("bnb_4bit_quant_type")));
    row(&adv, "quant_bits")->set_shown_text(QStringLiteral("4"));
    QCOMPARE(form.config().bnb_4bit_quant_type, std::string("fp4"));
    // 4 bits with full fine-tuning is the engine's error, shown at quant_bits.
    form.set_text("tuner_type", "full");
    QVERIFY(form.has_errors());
    bool named = false;
    for (const auto& d : form.diagnostics())
      named = named || (d.key == "quant_bits" && d.message.find("needs tuner_type: lora") != std::string::npos);
    QVERIFY2(named, format_all(form.diagnostics()).c_str());
  }

  void card_presets_set_the_memory_budget() {
    ConfigForm form;
    AdvancedPage adv(&form, nullptr);
    auto* cards = adv.findChild<QComboBox*>(QStringLiteral("cardPreset"));
    QVERIFY(cards);
    QCOMPARE(cards->currentIndex(), 0);  // auto: no card
    const int i48 = cards->findData(48);
    QVERIFY(i48 > 0);
    cards->setCurrentIndex(i48);
    emit cards->activated(i48);
    QCOMPARE(form.config().gpu_memory_budget_gib, 48.0);
    QCOMPARE(row(&adv, "gpu_memory_budget_gib")->shown_text(), QStringLiteral("48"));
    form.set_text("gpu_memory_budget_gib", "24");
    QTRY_COMPARE(cards->currentData().toInt(), 24);
    form.set_text("gpu_memory_budget_gib", "40");  // no card has 40 GiB
    QTRY_COMPARE(cards->currentIndex(), 0);
    form.set_text("gpu_memory_budget_gib", "24.5");  // a fraction: a budget, not a card
    QTRY_COMPARE(cards->currentIndex(), 0);
    QCOMPARE(form.config().gpu_memory_budget_gib, 24.5);
    QTRY_COMPARE(row(&adv, "gpu_memory_budget_gib")->shown_text(), QStringLiteral("24.5"));
    form.set_text("gpu_memory_budget_gib", "auto");
    QTRY_COMPARE(row(&adv, "gpu_memory_budget_gib")->shown_text(), QStringLiteral("auto"));
    for (int gib : {24, 32, 48, 80}) QVERIFY2(cards->findData(gib) > 0, qPrintable(QString::number(gib)));
  }

  void ulysses_switch_and_derived_length() {
    ConfigForm form;
    AdvancedPage adv(&form, nullptr);
    QTRY_VERIFY(!form.model_pending());
    QVERIFY(!adv.ulysses_switch()->isChecked());
    adv.ulysses_switch()->setChecked(true);
    QCOMPARE(form.config().sequence_parallel_size, std::int64_t{2});
    QCOMPARE(form.config().nproc_per_node, std::int64_t{2});
    QVERIFY(adv.derived()->text().contains(QStringLiteral("128")));  // 256 ÷ 2
    const std::int64_t kv = form.model()->num_key_value_heads;
    const auto p = parallel_layout(form.config(), kv);
    QVERIFY(adv.derived()->text().contains(
        QStringLiteral("Ulysses <b>%1</b> × ring <b>%2</b>").arg(p.ulysses).arg(p.ring)));
    adv.split_mode()->setCurrentIndex(1);
    QCOMPARE(form.config().ulysses_size, p.ulysses);
    adv.split_mode()->setCurrentIndex(0);
    QCOMPARE(form.config().ulysses_size, std::int64_t{0});
    adv.ulysses_switch()->setChecked(false);
    QCOMPARE(form.config().sequence_parallel_size, std::int64_t{1});
  }

  // Issue 23, finding 10: 99999999999 typed for max_length lost its last digits (the spin box
  // dropped the keystrokes) and became 9,999,999 without a word. Now the digits stay and the
  // field shows the engine's range.
  void out_of_range_numbers_are_refused_not_clipped() {
    ConfigForm form;
    Settings settings(tmp_.filePath(QStringLiteral("range.ini")));
    TrainPage train(&form, &settings, nullptr);
    train.show();
    FieldRow* r = row(&train, "max_length");
    auto* spin = qobject_cast<QSpinBox*>(r->editor());
    QVERIFY(spin);
    spin->setFocus();
    spin->selectAll();
    QTest::keyClicks(spin, QStringLiteral("99999999999"));
    QVERIFY2(spin->text().remove(spin->locale().groupSeparator()) == QStringLiteral("99999999999"),
             qPrintable(spin->text()));
    QVERIFY(form.has_edit_error("max_length"));
    QVERIFY(form.has_errors());
    const Diagnostics d = form.diagnostics_for("max_length");
    QVERIFY(!d.empty());
    QVERIFY2(d.front().message.find("16777216") != std::string::npos, d.front().message.c_str());
    // The config holds the last in-range number typed (the spin box tracks keystrokes), never
    // more than the engine accepts; Start waits for the error to be fixed.
    QCOMPARE(form.config().max_length, std::int64_t{9999999});
    // A valid number clears it, also the same value as before.
    spin->selectAll();
    QTest::keyClicks(spin, QStringLiteral("9999999"));
    QVERIFY(!form.has_edit_error("max_length"));
    QCOMPARE(form.config().max_length, std::int64_t{9999999});
    spin->selectAll();
    QTest::keyClicks(spin, QStringLiteral("4096"));
    QCOMPARE(form.config().max_length, std::int64_t{4096});
  }

  void dataset_scan_counts_as_the_engine_reads() {
    const QString jl = tmp_.filePath(QStringLiteral("d.jsonl"));
    const std::string rec =
        R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})";
    // A JSON object without a conversation is as malformed as a line that is not JSON: the
    // engine skips both, so the table counts both (it once called this file 4 samples).
    write(jl, (rec + "\n\n" + rec + "\nnot json\n{\"messages\": []}\n" + rec + "\n").c_str());
    auto s = scan_dataset(jl.toStdString());
    QVERIFY(s.ok);
    QCOMPARE(s.format, std::string("messages"));
    QCOMPARE(s.lines, std::int64_t{5});
    QCOMPARE(s.samples, std::int64_t{3});
    QCOMPARE(s.broken, std::int64_t{2});
    QCOMPARE(s.first_broken_line, std::int64_t{4});
    QCOMPARE(describe_scan(s), std::string("messages, 3 samples; 2 of 5 records malformed (first at line 4)"));
    const QString js = tmp_.filePath(QStringLiteral("a.json"));
    write(js, "[{\"instruction\": \"a\", \"output\": \"b\"}, {\"instruction\": \"c\", \"output\": \"d\"}]");
    s = scan_dataset(js.toStdString());
    QCOMPARE(s.format, std::string("alpaca"));
    QCOMPARE(s.samples, std::int64_t{2});
    QVERIFY(!scan_dataset(tmp_.filePath(QStringLiteral("missing.jsonl")).toStdString()).ok);
    write(js, "[{\"instruction\": ");
    s = scan_dataset(js.toStdString());
    QVERIFY(!s.ok);
    QVERIFY2(s.error.find("not a valid JSON array") != std::string::npos, s.error.c_str());
    // Every record malformed: the engine's words, not a count of zero samples.
    write(jl, "{broken\n{broken\n");
    s = scan_dataset(jl.toStdString());
    QVERIFY(!s.ok);
    QVERIFY2(s.error.find("every record is malformed") != std::string::npos, s.error.c_str());
  }

  void dataset_model_passes_the_tester_and_edits_the_key() {
    ConfigForm form;
    DatasetListModel model(&form);
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model.rowCount(), 1);
    QTRY_COMPARE(model.pending_scans(), 0);
    QVERIFY(model.index(0, DatasetListModel::Contents).data().toString().contains(QStringLiteral("2,000 samples")));
    const QString extra = tmp_.filePath(QStringLiteral("extra.jsonl"));
    write(extra, R"({"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]})"
                 "\n");
    model.add_files({extra});
    QCOMPARE(model.rowCount(), 2);
    QTRY_COMPARE(model.pending_scans(), 0);
    QVERIFY(
        model.index(1, DatasetListModel::Contents).data().toString().startsWith(QStringLiteral("sharegpt, 1 sample")));
    QVERIFY(model.setData(model.index(1, DatasetListModel::Samples), QStringLiteral("#100")));
    QCOMPARE(form.config().dataset.back(), extra.toStdString() + "#100");
    QCOMPARE(model.index(1, DatasetListModel::Samples).data().toString(), QStringLiteral("#100"));
    QVERIFY(!model.setData(model.index(1, DatasetListModel::Samples), QStringLiteral("-3")));
    model.remove_rows({0});
    QCOMPARE(model.rowCount(), 1);
    model.remove_rows({0});
    QCOMPARE(model.rowCount(), 0);
    QVERIFY(form.has_errors());  // no training data is an error at "dataset"
    QVERIFY(!form.diagnostics_for("dataset").empty());
  }

  void plan_items_model_passes_the_tester() {
    PlanItemsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    auto lc = load_preset_file(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml").toStdString());
    auto cc = check_config(lc.value, false);
    QVERIFY(cc.model);
    const MemoryPlan plan = plan_memory(cc.loaded.config, *cc.model);
    model.set_plan(plan);
    QCOMPARE(model.rowCount(), static_cast<int>(plan.items.size()));
    std::int64_t peak_items = 0;
    for (const auto& it : plan.items) peak_items += it.at_peak ? 1 : 0;
    QVERIFY(peak_items > 0);
    model.clear();
    QCOMPARE(model.rowCount(), 0);
  }

  void settings_keep_recent_presets() {
    Settings s(tmp_.filePath(QStringLiteral("recent.ini")));
    for (int i = 0; i < Settings::kMaxRecent + 3; ++i) s.add_recent_preset(QStringLiteral("/p/%1.yaml").arg(i));
    s.add_recent_preset(QStringLiteral("/p/3.yaml"));
    const QStringList r = s.recent_presets();
    QCOMPARE(r.size(), Settings::kMaxRecent);
    QCOMPARE(r.first(), QStringLiteral("/p/3.yaml"));
    QCOMPARE(r.count(QStringLiteral("/p/3.yaml")), 1);
  }
};

QTEST_MAIN(TstConfigForm)
#include "tst_config_form.moc"
