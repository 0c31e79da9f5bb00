// Where a hub id is found: the Hugging Face cache as huggingface_hub lays it out
// (models--org--name/{refs,snapshots,blobs}, files as links into blobs/), its environment
// variables in huggingface_hub's order, revisions (a branch or tag through refs/, a commit or
// its unique prefix), and the ModelScope cache (both layouts, dots as "___"). Each failure
// names what was looked for and what is there. The layouts are written here as the two
// libraries write them (huggingface_hub file_download.py, modelscope hub/file_download.py).
#include <QtTest>

#include <filesystem>
#include <fstream>

#include "config/model_config.h"
#include "config/preset_io.h"
#include "config/validate.h"

using namespace odyssey;
namespace fs = std::filesystem;

namespace {
void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << s;
}
bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

// A snapshot as huggingface_hub leaves it: each file a relative link to blobs/<hash>.
void hf_snapshot(const fs::path& repo, const std::string& commit, const std::string& config = "{}") {
  static int blob = 0;
  const std::string b = "blob" + std::to_string(++blob);
  write(repo / "blobs" / b, config);
  fs::create_directories(repo / "snapshots" / commit);
  fs::create_symlink(fs::path("../../blobs") / b, repo / "snapshots" / commit / "config.json");
}

const char* kVars[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "MODELSCOPE_CACHE"};
}  // namespace

class TstModelLocation : public QObject {
  Q_OBJECT
  fs::path tmp_;
  QByteArray home_;

 private slots:
  void initTestCase() { home_ = qgetenv("HOME"); }
  void init() {
    tmp_ = fs::temp_directory_path() / ("odyssey-loc-" + std::to_string(::getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    for (const char* v : kVars) qunsetenv(v);
    qputenv("HOME", QByteArray::fromStdString((tmp_ / "home").string()));
    qputenv("HF_HUB_CACHE", QByteArray::fromStdString((tmp_ / "hf").string()));
    qputenv("MODELSCOPE_CACHE", QByteArray::fromStdString((tmp_ / "ms").string()));
  }
  void cleanup() {
    fs::remove_all(tmp_);
    qputenv("HOME", home_);
  }

  // huggingface_hub: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, HF_HOME
  // defaulting to $XDG_CACHE_HOME/huggingface, that to ~/.cache/huggingface.
  void cacheDirectoryFollowsHuggingfaceHubsOrder() {
    for (const char* v : kVars) qunsetenv(v);
    QCOMPARE(hf_hub_cache_dir(), tmp_ / "home" / ".cache" / "huggingface" / "hub");
    QCOMPARE(modelscope_cache_dir(), tmp_ / "home" / ".cache" / "modelscope" / "hub");
    qputenv("XDG_CACHE_HOME", "/x");
    QCOMPARE(hf_hub_cache_dir(), fs::path("/x/huggingface/hub"));
    qputenv("HF_HOME", "~/hfh");
    QCOMPARE(hf_hub_cache_dir(), tmp_ / "home" / "hfh" / "hub");
    qputenv("HUGGINGFACE_HUB_CACHE", "/legacy");
    QCOMPARE(hf_hub_cache_dir(), fs::path("/legacy"));
    qputenv("HF_HUB_CACHE", "/new");
    QCOMPARE(hf_hub_cache_dir(), fs::path("/new"));
    qputenv("MODELSCOPE_CACHE", "/ms");
    QCOMPARE(modelscope_cache_dir(), fs::path("/ms"));
  }

  void xdgCacheHomeFindsAModel() {
    qunsetenv("HF_HUB_CACHE");
    qputenv("XDG_CACHE_HOME", QByteArray::fromStdString((tmp_ / "xdg").string()));
    const fs::path repo = tmp_ / "xdg" / "huggingface" / "hub" / "models--Org--Tiny";
    hf_snapshot(repo, "c0ffee1234567");
    write(repo / "refs" / "main", "c0ffee1234567");
    const ModelLocation loc = locate_model("Org/Tiny", "");
    QCOMPARE(loc.source, ModelLocation::HuggingFaceCache);
    QCOMPARE(loc.path, (repo / "snapshots" / "c0ffee1234567").string());
    QCOMPARE(loc.revision, std::string("c0ffee1234567"));
    QCOMPARE(loc.hub_id, std::string("Org/Tiny"));
  }

  void splitsTheRevisionSuffix() {
    std::string id, rev;
    QVERIFY(split_hub_revision("Qwen/Qwen2.5-7B@v1.0", &id, &rev));
    QCOMPARE(id, std::string("Qwen/Qwen2.5-7B"));
    QCOMPARE(rev, std::string("v1.0"));
    QVERIFY(!split_hub_revision("Qwen/Qwen2.5-7B", &id, &rev));
    QCOMPARE(id, std::string("Qwen/Qwen2.5-7B"));
    QVERIFY(!split_hub_revision("/abs/dir@x", &id, &rev));  // a directory named with @
    QVERIFY(!split_hub_revision("a/b/c@x", &id, &rev));
    QVERIFY(!split_hub_revision("Org/Name@", &id, &rev));
  }

  void revisionsByBranchCommitAndPrefix() {
    const fs::path repo = tmp_ / "hf" / "models--Org--Tiny";
    hf_snapshot(repo, "aaaa1111bbbb2222");
    hf_snapshot(repo, "cccc3333dddd4444");
    hf_snapshot(repo, "cccc3333eeee5555");
    write(repo / "refs" / "main", "aaaa1111bbbb2222\n");
    write(repo / "refs" / "v2", "cccc3333dddd4444");
    write(repo / "refs" / "pr" / "7", "cccc3333eeee5555");
    QCOMPARE(locate_model("Org/Tiny", "").revision, std::string("aaaa1111bbbb2222"));
    QCOMPARE(locate_model("Org/Tiny@v2", "").revision, std::string("cccc3333dddd4444"));
    QCOMPARE(locate_model("Org/Tiny", "", "refs/pr/7").source,
             ModelLocation::NotFound);  // refs are named without refs/
    QCOMPARE(locate_model("Org/Tiny", "", "pr/7").revision, std::string("cccc3333eeee5555"));
    QCOMPARE(locate_model("Org/Tiny@cccc3333dddd4444", "").revision, std::string("cccc3333dddd4444"));
    QCOMPARE(locate_model("Org/Tiny@aaaa111", "").revision, std::string("aaaa1111bbbb2222"));
    const ModelLocation both = locate_model("Org/Tiny@cccc333", "");
    QCOMPARE(both.source, ModelLocation::NotFound);
    QVERIFY2(contains(both.problem, "matches 2 snapshots") && contains(both.problem, "cccc3333dddd4444"),
             both.problem.c_str());
    const ModelLocation none = locate_model("Org/Tiny@v3", "");
    QCOMPARE(none.source, ModelLocation::NotFound);
    QVERIFY2(contains(none.problem, "'v3'") && contains(none.problem, "refs: main, pr/7, v2") &&
                 contains(none.problem, "aaaa1111bbbb2222"),
             none.problem.c_str());
    const ModelLocation clash = locate_model("Org/Tiny@v2", "", "main");
    QCOMPARE(clash.source, ModelLocation::NotFound);
    QVERIFY2(contains(clash.problem, "give one"), clash.problem.c_str());
  }

  void refsNamingAMissingSnapshot() {
    const fs::path repo = tmp_ / "hf" / "models--Org--Tiny";
    hf_snapshot(repo, "aaaa1111");
    write(repo / "refs" / "main", "ffff9999");
    const ModelLocation loc = locate_model("Org/Tiny", "");
    QCOMPARE(loc.source, ModelLocation::NotFound);
    QVERIFY2(contains(loc.problem, "names commit ffff9999") && contains(loc.problem, "no snapshot"),
             loc.problem.c_str());
  }

  // snapshot_download(revision=<commit>) writes no refs/main: the one snapshot is the model;
  // two are ambiguous and named.
  void withoutRefsMainOneSnapshotIsTheModel() {
    const fs::path repo = tmp_ / "hf" / "models--Org--Tiny";
    hf_snapshot(repo, "aaaa1111");
    QCOMPARE(locate_model("Org/Tiny", "").revision, std::string("aaaa1111"));
    hf_snapshot(repo, "bbbb2222");
    const ModelLocation two = locate_model("Org/Tiny", "");
    QCOMPARE(two.source, ModelLocation::NotFound);
    QVERIFY2(contains(two.problem, "no refs/main") && contains(two.problem, "aaaa1111, bbbb2222"), two.problem.c_str());
  }

  // An interrupted download leaves config.json's link pointing at a blob not yet there.
  void brokenBlobLinkIsNamed() {
    const fs::path repo = tmp_ / "hf" / "models--Org--Tiny";
    hf_snapshot(repo, "aaaa1111");
    write(repo / "refs" / "main", "aaaa1111");
    for (const auto& e : fs::directory_iterator(repo / "blobs")) fs::remove(e.path());
    const ModelLocation loc = locate_model("Org/Tiny", "");
    QCOMPARE(loc.source, ModelLocation::NotFound);
    QVERIFY2(contains(loc.problem, "config.json is a link to a blob that is missing"), loc.problem.c_str());
  }

  void modelScopeLayoutsAndDots() {
    write(tmp_ / "ms" / "models" / "Qwen" / "Qwen2___5-0___5B" / "config.json", "{}");
    write(tmp_ / "ms" / "Old" / "Model" / "config.json", "{}");
    ModelLocation loc = locate_model("Qwen/Qwen2.5-0.5B", "");
    QCOMPARE(loc.source, ModelLocation::ModelScopeCache);
    QVERIFY(contains(loc.path, "Qwen2___5-0___5B"));
    QCOMPARE(locate_model("Old/Model", "").source, ModelLocation::ModelScopeCache);
    // ModelScope records no revision: asking for one is answered by the HF cache only.
    loc = locate_model("Qwen/Qwen2.5-0.5B@v1", "");
    QCOMPARE(loc.source, ModelLocation::NotFound);
    QVERIFY2(contains(loc.problem, "revision"), loc.problem.c_str());
    const auto all = cached_models();
    QVERIFY(std::any_of(all.begin(), all.end(), [](auto& p) { return p.first == "Qwen/Qwen2.5-0.5B"; }));
    QVERIFY(std::any_of(all.begin(), all.end(), [](auto& p) { return p.first == "Old/Model"; }));
  }

  // A run's config.yaml records the snapshot directory and its commit: validate accepts that
  // pair, and refuses a revision beside a plain directory (it would select nothing).
  void revisionBesideADirectory() {
    const fs::path repo = tmp_ / "hf" / "models--Org--Tiny";
    hf_snapshot(repo, "aaaa1111");
    write(tmp_ / "plain" / "config.json", "{}");
    auto check = [&](const std::string& model, const std::string& rev) {
      LoadedConfig lc;
      lc.config.model = model;
      lc.config.model_revision = rev;
      lc.origin.keys["model_revision"] = {"p.yaml", 3};
      return format_all(check_config(lc, false).diagnostics);
    };
    QVERIFY(!contains(check((repo / "snapshots" / "aaaa1111").string(), "aaaa1111"), "model_revision"));
    const std::string e = check((tmp_ / "plain").string(), "aaaa1111");
    QVERIFY2(contains(e, "model_revision") && contains(e, "a directory"), e.c_str());
  }
};

QTEST_GUILESS_MAIN(TstModelLocation)
#include "tst_model_location.moc"
