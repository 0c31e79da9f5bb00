// Every preset shipped in presets/ loads and validates (files may be absent on this
// machine: the large models live on GPU servers), re-saves to an equal config, and the
// quickstart is runnable as is: its model directory and datasets exist.
#include <QtTest>

#include <filesystem>

#include "config/validate.h"

using namespace odyssey;
namespace fs = std::filesystem;

class TstPresetsDir : public QObject {
  Q_OBJECT
 private slots:
  void everyPresetValidates() {
    int n = 0;
    for (const auto& e : fs::directory_iterator(fs::path(ODYSSEY_SOURCE_DIR) / "presets")) {
      if (e.path().extension() != ".yaml") continue;
      ++n;
      auto r = load_preset_file(e.path().string());
      QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
      auto cc = check_config(r.value, false);
      QVERIFY2(cc.ok(), (e.path().string() + "\n" + format_all(cc.diagnostics)).c_str());
      QVERIFY2(cc.model.has_value(), e.path().c_str());  // heads and memory were checked
      QVERIFY2(!r.value.config.description.empty(), e.path().c_str());
      auto again = load_preset_text(save_preset_text(r.value.config), "resaved", "");
      QVERIFY(again.ok());
      QVERIFY(again.value.config == r.value.config);
    }
    QVERIFY(n >= 5);
  }

  void quickstartIsRunnableAsIs() {
    auto r = load_embedded_quickstart();
    QVERIFY(r.ok());
    auto cc = check_config(r.value, true);
    QVERIFY2(cc.ok(), format_all(cc.diagnostics).c_str());
    QCOMPARE(cc.location.source, ModelLocation::Directory);
    QCOMPARE(QString::fromStdString(cc.loaded.config.device), QString("cpu"));
    const TrainConfig resolved = resolve_paths(cc.loaded, cc.location);
    QVERIFY(fs::path(resolved.model).is_absolute());
    QVERIFY(fs::exists(resolved.dataset.at(0)));
  }
};

QTEST_APPLESS_MAIN(TstPresetsDir)
#include "tst_presets_dir.moc"
