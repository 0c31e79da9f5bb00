// The GPUs panel: NVML loaded at run time (the no-library path is tested for real: a
// library that does not exist, and the driver's own soname on a machine without it), and
// the list/check-box wiring to gpu_ids with GPUs injected through set_probe_result(), the
// same setter the probe's results go through.
#include <QAbstractItemModelTester>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include <dlfcn.h>

#include "advanced_page.h"
#include "config_form.h"
#include "gpu_list_model.h"
#include "gpu_panel.h"
#include "gpu_probe.h"
#include "main_window.h"
#include "planner_gauge.h"
#include "settings.h"

using namespace odyssey;
using namespace odyssey::ui;

namespace {

constexpr std::int64_t kGiB = 1024ll * 1024 * 1024;

GpuProbeResult two_gpus() {
  GpuProbeResult r;
  r.nvml = true;
  r.driver = "570.86.15";
  r.gpus = {{0, "NVIDIA A100-SXM4-80GB", "GPU-aaaa", 80 * kGiB, 1 * kGiB, 0},
            {1, "NVIDIA H200", "GPU-bbbb", 141 * kGiB, 70 * kGiB, 97}};
  return r;
}

bool driver_present() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

QModelIndex use(GpuListModel* m, int row) { return m->index(row, GpuListModel::Use); }

}  // namespace

class TstGpuPanel : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private slots:
  void a_missing_library_is_reported_not_fatal() {
    GpuProbe probe("libodyssey-no-such-nvml.so.1");
    const GpuProbeResult r = probe.probe();
    QVERIFY(!r.nvml);
    QVERIFY(r.gpus.empty());
    QVERIFY2(
        QString::fromStdString(r.problem).contains(QStringLiteral("libodyssey-no-such-nvml.so.1 could not be loaded")),
        r.problem.c_str());
    // Remembered: the second probe says the same without trying again.
    QCOMPARE(probe.probe().problem, r.problem);

    ConfigForm form;
    GpuPanel panel(&form, std::make_shared<GpuProbe>("libodyssey-no-such-nvml.so.1"), nullptr);
    QTRY_COMPARE(panel.probes_done(), 1);
    QVERIFY2(panel.status()->text().contains(QStringLiteral("No NVIDIA GPU found: training runs on the CPU")),
             qPrintable(panel.status()->text()));
    QVERIFY(panel.status()->text().contains(QStringLiteral("could not be loaded")));
    QVERIFY(panel.table()->isHidden());
    QVERIFY(!panel.refresh_timer()->isActive());  // nothing will change without NVML
    // device cuda with no GPU: the panel warns that a run would fail here.
    QVERIFY(form.set_text("device", "cuda").empty());
    QVERIFY(panel.status()->text().contains(QStringLiteral("device is cuda")));
  }

  void this_machine_without_the_driver_trains_on_the_cpu() {
    if (driver_present()) QSKIP("libnvidia-ml.so.1 is installed here: the no-driver path is covered by the test above");
    ConfigForm form;
    AdvancedPage page(&form, nullptr);  // the real probe, as the window builds it
    QTRY_COMPARE(page.gpu_panel()->probes_done(), 1);
    QVERIFY2(
        page.gpu_panel()->status()->text().contains(QStringLiteral("No NVIDIA GPU found: training runs on the CPU")),
        qPrintable(page.gpu_panel()->status()->text()));
    QVERIFY(page.gpu_panel()->status()->text().contains(QStringLiteral("libnvidia-ml.so.1")));
  }

  void check_boxes_write_gpu_ids() {
    ConfigForm form;
    QVERIFY(form.set_text("device", "auto").empty());
    GpuPanel panel(&form, nullptr, nullptr);
    GpuListModel* m = panel.model();
    QAbstractItemModelTester tester(m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy capacity(&panel, &GpuPanel::capacity_detected);
    panel.set_probe_result(two_gpus());
    QCOMPARE(m->rowCount(), 2);
    QVERIFY(!panel.table()->isHidden());
    QCOMPARE(m->data(m->index(1, GpuListModel::Gpu)).toString(), QStringLiteral("NVIDIA H200"));
    QCOMPARE(m->data(m->index(1, GpuListModel::Memory)).toString(), QStringLiteral("70.0 / 141.0 GiB"));
    QCOMPARE(m->data(m->index(1, GpuListModel::Utilization)).toString(), QStringLiteral("97 %"));
    QVERIFY(panel.status()->text().contains(QStringLiteral("2 NVIDIA GPU(s); training uses every one")));
    QVERIFY(panel.status()->text().contains(QStringLiteral("570.86.15")));
    // gpu_ids empty: every GPU is used, and the planner gets the smaller memory.
    QCOMPARE(m->data(use(m, 0), Qt::CheckStateRole).value<Qt::CheckState>(), Qt::Checked);
    QCOMPARE(m->data(use(m, 1), Qt::CheckStateRole).value<Qt::CheckState>(), Qt::Checked);
    QCOMPARE(capacity.size(), 1);
    QCOMPARE(capacity.last().first().toDouble(), 80.0);

    // Unchecking GPU 0 writes gpu_ids [1]; the capacity follows the H200.
    QVERIFY(m->setData(use(m, 0), Qt::Unchecked, Qt::CheckStateRole));
    QCOMPARE(form.config().gpu_ids, std::vector<std::int64_t>{1});
    QCOMPARE(m->data(use(m, 0), Qt::CheckStateRole).value<Qt::CheckState>(), Qt::Unchecked);
    QCOMPARE(capacity.last().first().toDouble(), 141.0);
    QVERIFY(form.preset_text().find("gpu_ids: [1]") != std::string::npos);
    // The last GPU cannot be unchecked (gpu_ids [] would mean all of them).
    QVERIFY(!m->setData(use(m, 1), Qt::Unchecked, Qt::CheckStateRole));
    QCOMPARE(form.config().gpu_ids, std::vector<std::int64_t>{1});
    // Every GPU checked again: the default, an empty list.
    QVERIFY(m->setData(use(m, 0), Qt::Checked, Qt::CheckStateRole));
    QVERIFY(form.config().gpu_ids.empty());

    // A preset edit shows in the check boxes; ids this machine lacks are named.
    QVERIFY(form.set_text("gpu_ids", "[0, 3]").empty());
    QCOMPARE(m->data(use(m, 1), Qt::CheckStateRole).value<Qt::CheckState>(), Qt::Unchecked);
    QVERIFY2(panel.status()->text().contains(QStringLiteral("gpu_ids lists 3, which this machine does not have")),
             qPrintable(panel.status()->text()));

    // device cpu: no GPU is used and the boxes are disabled.
    QVERIFY(form.set_text("gpu_ids", "[]").empty());
    QVERIFY(form.set_text("device", "cpu").empty());
    QCOMPARE(m->data(use(m, 0), Qt::CheckStateRole).value<Qt::CheckState>(), Qt::Unchecked);
    QVERIFY(!(m->flags(use(m, 0)) & Qt::ItemIsEnabled));
    QVERIFY(!m->setData(use(m, 0), Qt::Unchecked, Qt::CheckStateRole));
    QVERIFY(panel.status()->text().contains(QStringLiteral("device is cpu")));
  }

  void refreshes_update_rows_in_place() {
    ConfigForm form;
    GpuPanel panel(&form, nullptr, nullptr);
    GpuListModel* m = panel.model();
    QAbstractItemModelTester tester(m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    panel.set_probe_result(two_gpus());
    QSignalSpy resets(m, &QAbstractItemModel::modelReset);
    QSignalSpy changes(m, &QAbstractItemModel::dataChanged);
    GpuProbeResult busier = two_gpus();
    busier.gpus[0].utilization = 55;
    busier.gpus[0].memory_used = 40 * kGiB;
    panel.set_probe_result(busier);
    QCOMPARE(resets.size(), 0);
    QCOMPARE(changes.size(), 1);
    QCOMPARE(m->data(m->index(0, GpuListModel::Utilization)).toString(), QStringLiteral("55 %"));
    QCOMPARE(m->data(m->index(0, GpuListModel::Memory)).toString(), QStringLiteral("40.0 / 80.0 GiB"));
    panel.set_probe_result(busier);  // nothing new: no signal
    QCOMPARE(changes.size(), 1);
    // A GPU gone (or another set): the list is rebuilt.
    GpuProbeResult one = two_gpus();
    one.gpus.pop_back();
    panel.set_probe_result(one);
    QCOMPARE(resets.size(), 1);
    QCOMPARE(m->rowCount(), 1);
  }

  void the_window_planner_follows_the_detected_memory() {
    MainWindow w(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("s.ini"))));
    GpuPanel* panel = w.advanced_page()->gpu_panel();
    QTRY_VERIFY(panel->probes_done() >= 1);
    if (!panel->model()->gpus().empty())
      QSKIP("this machine has GPUs: the probe's list would replace the injected one");
    QVERIFY(w.form()->set_text("device", "auto").empty());
    panel->set_probe_result(two_gpus());
    QCOMPARE(w.gauge()->capacity()->value(), 80.0);
  }
};

QTEST_MAIN(TstGpuPanel)
#include "tst_gpu_panel.moc"
