// The field table is the single description of every setting: check it is complete and
// consistent (unique keys, help text, defaults inside their own ranges, documented in
// docs/config.md), and the derived quantities every consumer relies on.
#include <QtTest>

#include <fstream>
#include <set>
#include <sstream>

#include "config/preset_io.h"
#include "config/train_config.h"

using namespace odyssey;

class TstTrainConfig : public QObject {
  Q_OBJECT
 private slots:
  void fieldTableIsConsistent() {
    std::set<std::string_view> keys;
    const auto groups = field_groups();
    const TrainConfig defaults;
    for (const auto& f : train_config_fields()) {
      QVERIFY2(keys.insert(f.key).second, std::string(f.key).c_str());
      QVERIFY2(f.help.size() > 10, std::string(f.key).c_str());
      QVERIFY2(std::find(groups.begin(), groups.end(), f.group) != groups.end(), std::string(f.key).c_str());
      // The default must itself load: a default outside its own range would be a trap.
      const std::string yaml = std::string(f.key) + ": " + field_value_text(defaults, f) + "\n";
      auto r = load_preset_text(yaml, "defaults", "");
      QVERIFY2(r.ok(), (yaml + format_all(r.diagnostics)).c_str());
    }
    QVERIFY(keys.size() >= 50);
  }

  void everyKeyIsDocumented() {
    std::ifstream in(std::string(ODYSSEY_SOURCE_DIR) + "/docs/config.md");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string doc = ss.str();
    QVERIFY(!doc.empty());
    for (const auto& f : train_config_fields())
      QVERIFY2(doc.find("| `" + std::string(f.key) + "` |") != std::string::npos,
               ("docs/config.md lacks " + std::string(f.key) + "; regenerate with show --keys --markdown").c_str());
  }

  void checkpointPolicy() {
    CheckpointPolicy p;
    QVERIFY(parse_checkpoint_policy("every:3", &p));
    QCOMPARE(p.kind, CheckpointPolicy::EveryK);
    QCOMPARE(p.every, std::int64_t(3));
    QVERIFY(parse_checkpoint_policy("auto", &p) && p.kind == CheckpointPolicy::Auto);
    QVERIFY(!parse_checkpoint_policy("every:", &p));
    QVERIFY(!parse_checkpoint_policy("every:0", &p));
    QVERIFY(!parse_checkpoint_policy("sometimes", &p));
  }

  void datasetSpec() {
    DatasetSpec d;
    std::string e;
    QVERIFY(parse_dataset_spec("data/a#b.jsonl#500", &d, &e));  // the last '#' counts
    QCOMPARE(QString::fromStdString(d.path), QString("data/a#b.jsonl"));
    QCOMPARE(d.samples, std::int64_t(500));
    QVERIFY(parse_dataset_spec("plain.jsonl", &d, &e) && d.samples == -1);
    QVERIFY(!parse_dataset_spec("a.jsonl#0", &d, &e));
    QVERIFY(!parse_dataset_spec("#5", &d, &e));
  }

  void parallelLayout() {
    TrainConfig c;
    c.nproc_per_node = 8;
    c.sequence_parallel_size = 4;
    auto p = parallel_layout(c, 8);
    QCOMPARE(p.world_size, std::int64_t(8));
    QCOMPARE(p.dp, std::int64_t(2));
    QCOMPARE(p.ulysses, std::int64_t(4));
    QCOMPARE(p.ring, std::int64_t(1));
    QCOMPARE(sequence_pad_multiple(p), std::int64_t(4));
    c.sequence_parallel_size = 8;
    p = parallel_layout(c, 2);  // 2 KV heads: Ulysses 2, ring 4
    QCOMPARE(p.ulysses, std::int64_t(2));
    QCOMPARE(p.ring, std::int64_t(4));
    QCOMPARE(sequence_pad_multiple(p), std::int64_t(16));
    c.ulysses_size = 8;  // explicit: KV heads replicated
    QCOMPARE(parallel_layout(c, 2).ulysses, std::int64_t(8));
    c.gpu_ids = {0, 1, 2};
    c.nproc_per_node = 0;
    QCOMPARE(resolved_nproc_per_node(c), std::int64_t(3));
  }
};

QTEST_APPLESS_MAIN(TstTrainConfig)
#include "tst_train_config.moc"
