// Where a model argument is on this machine: a directory, or a hub id in the Hugging Face or
// ModelScope cache (layouts and environment variables in docs/model.md, "Where a model is
// found"). No LibTorch: validate, plan, run and the GUI's picker share it.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <utility>

#include "common/regular_file.h"
#include "common/text.h"
#include "config/model_config.h"

namespace odyssey {

// Defined in the generated embedded_data.cpp (resources/model-shapes/*.json).
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_model_shapes();

namespace fs = std::filesystem;

std::string ModelLocation::describe() const {
  const std::string rev = revision.empty() ? std::string() : " (revision " + revision + ")";
  switch (source) {
    case Directory: return "directory " + path;
    case HuggingFaceCache: return "Hugging Face cache " + path + rev;
    case ModelScopeCache: return "ModelScope cache " + path;
    case BundledShape: return "bundled shape only (weights not on this machine)";
    case NotFound: return problem.empty() ? "not found" : "not found: " + problem;
  }
  return {};
}

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string();
}

fs::path home() {
  const std::string h = env("HOME");
  return h.empty() ? fs::path("/") : fs::path(h);
}

// "~" and "~/x" as a shell expands them (huggingface_hub expands ~ in its variables too).
fs::path expand_home(const std::string& p) {
  if (p == "~") return home();
  if (text::starts_with(p, "~/")) return home() / p.substr(2);
  return p;
}

bool has_config(const fs::path& d) {
  std::error_code ec;
  return fs::is_regular_file(d / "config.json", ec);
}

bool is_dir(const fs::path& d) {
  std::error_code ec;
  return fs::is_directory(d, ec);
}

// A small text file (refs/<name>), read only when it is a regular file.
std::string read_small(const fs::path& p, bool* ok) {
  std::string out, why;
  *ok = read_regular_file(p.string(), 4096, &out, &why);
  return text::trim(out);
}

std::vector<std::string> entries(const fs::path& d, bool dirs_only) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(d, ec))
    if (!dirs_only || e.is_directory(ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// refs/ holds one file per branch or tag, nested for names with a slash (refs/pr/1).
std::vector<std::string> ref_names(const fs::path& refs) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(refs, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) out.push_back(fs::relative(it->path(), refs, ec).generic_string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

bool is_hex(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Why a snapshot directory that exists cannot be used; empty when config.json is there.
std::string snapshot_problem(const fs::path& snap) {
  if (has_config(snap)) return {};
  std::error_code ec;
  const fs::path c = snap / "config.json";
  if (fs::is_symlink(c, ec)) return c.string() + " is a link to a blob that is missing (an interrupted download?)";
  return snap.string() + " holds no config.json (an interrupted or partial download?)";
}

struct Found {
  std::string path, revision, problem;
};

// Hugging Face cache: <cache>/models--<org>--<name>/{refs/<ref>, snapshots/<commit>/, blobs/}.
// `want` is a branch or tag name (refs/<want> holds the commit) or a commit hash (full, or a
// prefix of at least 7 characters that names one snapshot).
Found hf_find(const std::string& id, const std::string& want_in) {
  Found f;
  std::string folder = "models--";
  for (char c : id) folder += c == '/' ? std::string("--") : std::string(1, c);
  const fs::path root = hf_hub_cache_dir() / folder;
  if (!is_dir(root)) return f;
  const std::string want = want_in.empty() ? "main" : want_in;
  const fs::path snaps = root / "snapshots";
  bool ok = false;
  std::string commit = want.find("..") == std::string::npos ? read_small(root / "refs" / want, &ok) : std::string();
  if (ok && !commit.empty()) {
    if (!is_dir(snaps / commit)) {
      f.problem =
          (root / "refs" / want).string() + " names commit " + commit + ", which has no snapshot in " + snaps.string();
      return f;
    }
  } else if (is_hex(want) && want.size() >= 7) {
    std::vector<std::string> match;
    for (const auto& s : entries(snaps, true))
      if (text::starts_with(s, want)) match.push_back(s);
    if (match.size() > 1) {
      f.problem = "revision " + want + " matches " + std::to_string(match.size()) + " snapshots in " + snaps.string() +
                  " (" + join(match) + "); give more of the commit hash";
      return f;
    }
    if (match.size() == 1) commit = match.front();
  } else if (want_in.empty()) {
    // No refs/main (a download of one revision only): the one usable snapshot, if it is one.
    std::vector<std::string> usable;
    for (const auto& s : entries(snaps, true))
      if (has_config(snaps / s)) usable.push_back(s);
    if (usable.size() == 1) commit = usable.front();
    else if (usable.size() > 1) {
      f.problem = root.string() + " has no refs/main and " + std::to_string(usable.size()) + " snapshots (" +
                  join(usable) + "); name one with model_revision or " + id + "@<revision>";
      return f;
    }
  }
  if (commit.empty()) {
    f.problem = "revision " + text::quoted(want) + " of " + id + " is not in the Hugging Face cache " + root.string() +
                " (refs: " + join(ref_names(root / "refs")) + "; snapshots: " + join(entries(snaps, true)) + ")";
    return f;
  }
  const fs::path snap = snaps / commit;
  f.problem = snapshot_problem(snap);
  if (f.problem.empty()) {
    f.path = snap.string();
    f.revision = commit;
  }
  return f;
}

// ModelScope cache: <cache>/models/<org>/<name> (modelscope 1.x from about 1.19) or
// <cache>/<org>/<name> (earlier), the name's dots written as "___".
Found modelscope_find(const std::string& id) {
  Found f;
  const auto slash = id.find('/');
  const std::string org = id.substr(0, slash), name = id.substr(slash + 1);
  std::string mangled = name;
  for (std::size_t p; (p = mangled.find('.')) != std::string::npos;) mangled.replace(p, 1, "___");
  const fs::path base = modelscope_cache_dir();
  for (const fs::path& root : {base / "models", base})
    for (const std::string& n : {mangled, name}) {
      const fs::path d = root / org / n;
      if (!is_dir(d)) continue;
      f.problem = snapshot_problem(d);
      if (f.problem.empty()) {
        f.path = d.string();
        return f;
      }
    }
  return f;
}

}  // namespace

fs::path hf_hub_cache_dir() {
  // huggingface_hub's order: HF_HUB_CACHE, the older HUGGINGFACE_HUB_CACHE, then
  // $HF_HOME/hub, with HF_HOME defaulting to $XDG_CACHE_HOME/huggingface (~/.cache/huggingface).
  for (const char* v : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"})
    if (const std::string s = env(v); !s.empty()) return expand_home(s);
  if (const std::string h = env("HF_HOME"); !h.empty()) return expand_home(h) / "hub";
  if (const std::string x = env("XDG_CACHE_HOME"); !x.empty()) return expand_home(x) / "huggingface" / "hub";
  return home() / ".cache" / "huggingface" / "hub";
}

fs::path modelscope_cache_dir() {
  if (const std::string c = env("MODELSCOPE_CACHE"); !c.empty()) return expand_home(c);
  return home() / ".cache" / "modelscope" / "hub";
}

bool split_hub_revision(const std::string& model, std::string* id, std::string* revision) {
  const auto at = model.rfind('@');
  *id = model;
  revision->clear();
  if (at == std::string::npos || at == 0 || at + 1 == model.size()) return false;
  const std::string head = model.substr(0, at);
  if (std::count(head.begin(), head.end(), '/') != 1 || head.front() == '/' || head.front() == '.' ||
      head.front() == '~')
    return false;
  *id = head;
  *revision = model.substr(at + 1);
  return true;
}

ModelLocation locate_model(const std::string& model, const std::string& base_dir, const std::string& revision) {
  ModelLocation loc;
  if (model.empty()) return loc;
  std::error_code ec;
  const fs::path p = expand_home(model);
  std::vector<fs::path> tries;
  if (p.is_absolute()) tries.push_back(p);
  else {
    if (!base_dir.empty()) tries.push_back(fs::path(base_dir) / p);
    tries.push_back(fs::current_path(ec) / p);
  }
  for (const auto& t : tries)
    if (has_config(t)) {
      loc.source = ModelLocation::Directory;
      loc.path = fs::weakly_canonical(t, ec).string();
      return loc;
    }
  // A hub id is "org/name" with exactly one slash, optionally "@revision".
  std::string id, rev;
  const bool suffixed = split_hub_revision(model, &id, &rev);
  const bool hub_like = !p.is_absolute() && std::count(id.begin(), id.end(), '/') == 1 &&
                        id.find("..") == std::string::npos && id[0] != '.' && id[0] != '~' && id.back() != '/';
  if (!hub_like) return loc;
  if (suffixed && !revision.empty() && rev != revision) {
    loc.problem = model + " names revision " + rev + " and model_revision names " + revision + "; give one";
    return loc;
  }
  if (!suffixed) rev = revision;
  loc.hub_id = id;
  loc.requested_revision = rev;
  Found hf = hf_find(id, rev);
  if (!hf.path.empty()) {
    loc.source = ModelLocation::HuggingFaceCache;
    loc.path = hf.path;
    loc.revision = hf.revision;
    return loc;
  }
  // ModelScope keeps one copy per model and records no revision on disk: a revision
  // request is answered by the Hugging Face cache only.
  Found ms = rev.empty() ? modelscope_find(id) : Found{};
  if (!ms.path.empty()) {
    loc.source = ModelLocation::ModelScopeCache;
    loc.path = ms.path;
    return loc;
  }
  loc.problem = !hf.problem.empty() ? hf.problem : ms.problem;
  if (!loc.problem.empty() || !rev.empty()) {
    if (loc.problem.empty())
      loc.problem = id + " is not in the Hugging Face cache " + hf_hub_cache_dir().string() +
                    " (a revision is looked up there only)";
    return loc;
  }
  std::string shape_name;
  for (char c : id) shape_name += c == '/' ? std::string("--") : std::string(1, c);
  for (const auto& [name, body] : embedded_model_shapes())
    if (name == shape_name) {
      loc.source = ModelLocation::BundledShape;
      loc.path = "bundled:" + shape_name;
      return loc;
    }
  return loc;
}

Result<HfModelConfig> load_located_model_config(const ModelLocation& loc) {
  if (loc.source == ModelLocation::BundledShape) {
    const std::string name = loc.path.substr(8);
    for (const auto& [n, body] : embedded_model_shapes())
      if (n == name) return parse_model_config(std::string(body), "bundled model shape " + name);
  }
  return load_model_config(loc.path);
}

std::vector<std::pair<std::string, std::string>> cached_models() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : entries(hf_hub_cache_dir(), true)) {
    if (!text::starts_with(n, "models--")) continue;
    std::string id = n.substr(8);
    if (auto pos = id.find("--"); pos != std::string::npos) id.replace(pos, 2, "/");
    if (Found f = hf_find(id, ""); !f.path.empty()) out.emplace_back(id, f.path);
  }
  const fs::path ms = modelscope_cache_dir();
  for (const fs::path& root : {ms / "models", ms})
    for (const auto& org : entries(root, true))
      for (const auto& m : entries(root / org, true))
        if (has_config(root / org / m)) {
          std::string name = m;
          for (std::size_t q; (q = name.find("___")) != std::string::npos;) name.replace(q, 3, ".");
          out.emplace_back(org + "/" + name, (root / org / m).string());
        }
  return out;
}

}  // namespace odyssey
