#include "train/checkpoint_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <fstream>
#include <sstream>

#include "common/json_dump.h"
#include "common/regular_file.h"
#include "config/hf_checkpoint.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace odyssey::train {
namespace {

namespace fs = std::filesystem;

bool sync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

bool write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// Generator states are opaque byte strings (torch.get_rng_state()); stored raw, one file each.
bool write_bytes(const fs::path& file, const torch::Tensor& state) {
  const torch::Tensor b = state.contiguous();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data_ptr<std::uint8_t>()), static_cast<std::streamsize>(b.numel()));
  out.flush();
  return static_cast<bool>(out);
}

// rename(2) that refuses to replace `to` (an existing checkpoint is never replaced). Where
// the filesystem lacks RENAME_NOREPLACE (EINVAL), the existence check before it stands.
bool rename_no_replace(const fs::path& from, const fs::path& to, std::error_code& ec) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS) {
    if (fs::exists(fs::symlink_status(to))) {
      ec = std::make_error_code(std::errc::file_exists);
      return false;
    }
    fs::rename(from, to, ec);
    return !ec;
  }
  ec = std::error_code(errno, std::generic_category());
  return false;
}

// The file list of odyssey_state.json: every regular file of `dir` but itself, sorted by
// name, with its size and checksum.
Result<std::vector<SavedFile>> list_files(const fs::path& dir) {
  Result<std::vector<SavedFile>> r;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == kOdysseyStateFile) continue;
    std::string error;
    const auto sum = file_checksum64(e.path(), &error);
    if (!sum) {
      r.diagnostics.push_back(error_at(e.path().string(), {}, "cannot be read back for its checksum: " + error));
      return r;
    }
    r.value.push_back({name, static_cast<std::int64_t>(e.file_size()), *sum});
  }
  if (ec) r.diagnostics.push_back(error_at(dir.string(), {}, "cannot be listed: " + ec.message()));
  std::sort(r.value.begin(), r.value.end(), [](const SavedFile& a, const SavedFile& b) { return a.name < b.name; });
  return r;
}

std::optional<torch::Tensor> read_bytes(const fs::path& file) {
  // Generator states are a few KiB; a FIFO or a huge file in their place is not one.
  std::string bytes, why;
  if (!read_regular_file(file.string(), std::uint64_t{1} << 20, &bytes, &why)) return std::nullopt;
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

const std::vector<std::string>& model_side_files() {
  static const std::vector<std::string> files{"config.json",
                                              "generation_config.json",
                                              "tokenizer.json",
                                              "tokenizer_config.json",
                                              "special_tokens_map.json",
                                              "vocab.json",
                                              "merges.txt",
                                              "chat_template.jinja"};
  return files;
}

Result<std::int64_t> save_checkpoint(const fs::path& final_dir, StepEngine& engine, const CheckpointContents& what,
                                     const TrainerState& state) {
  Result<std::int64_t> r;
  std::error_code ec;
  const fs::path tmp = final_dir.parent_path() / (final_dir.filename().string() + ".tmp-" + std::to_string(::getpid()));
  if (fs::exists(fs::symlink_status(final_dir, ec))) {
    // One run saves a step once; a second writer of this run directory (or a reused one)
    // would otherwise destroy a checkpoint someone may rely on.
    r.diagnostics.push_back(error_at(final_dir.string(), {},
                                     "already exists; a checkpoint is never replaced (is another run "
                                     "writing this run directory?)"));
    for (const auto& shard : what.optimizer_shards) fs::remove(shard, ec);
    return r;
  }
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) {
    r.diagnostics.push_back(error_at(tmp.string(), {}, "cannot create the checkpoint directory: " + ec.message()));
    return r;
  }
  auto fail = [&](Diagnostics d) {
    r.diagnostics.insert(r.diagnostics.end(), d.begin(), d.end());
    std::error_code ignore;
    fs::remove_all(tmp, ignore);
    for (const auto& shard : what.optimizer_shards) fs::remove(shard, ignore);
    return r;
  };
  const torch::Device device = engine.model()->options().device;
  if (what.lora) {
    auto d = save_adapter(engine.model(), *what.lora, what.base_model, tmp.string());
    if (has_errors(d)) return fail(d);
  } else {
    auto saved = model::save_weights(engine.model(), tmp.string(), 5'000'000'000, false);
    if (!saved.ok()) return fail(saved.diagnostics);
    for (const auto& f : model_side_files()) {
      const fs::path src = fs::path(what.base_model) / f;
      if (!fs::exists(src)) continue;
      fs::copy_file(src, tmp / f, fs::copy_options::overwrite_existing, ec);
      if (ec) return fail({error_at((tmp / f).string(), {}, "cannot be written: " + ec.message())});
    }
  }
  if (what.optimizer_shards.empty()) {
    auto opt = save_safetensors((tmp / "optimizer.safetensors").string(), engine.optimizer().state());
    if (!opt.ok()) return fail(opt.diagnostics);
  } else {
    for (const auto& shard : what.optimizer_shards) {
      // ".checkpoint-<step>-optimizer-rank-…" → "optimizer-rank-…"
      const std::string name = shard.filename().string();
      const auto at = name.find("optimizer-rank-");
      fs::rename(shard, tmp / (at == std::string::npos ? name : name.substr(at)), ec);
      if (ec) return fail({error_at(shard.string(), {}, "cannot be moved into the checkpoint: " + ec.message())});
    }
  }
  if (!write_bytes(tmp / "rng_cpu.bin", at::detail::getDefaultCPUGenerator().get_state()) ||
      (device.is_cuda() &&
       !write_bytes(tmp / "rng_cuda.bin", at::globalContext().defaultGenerator(device).get_state())))
    return fail({error_at((tmp / "rng_cpu.bin").string(), {}, "cannot be written (disk full?)")});
  nlohmann::ordered_json j;
  j["step"] = state.step;
  j["total_steps"] = state.total_steps;
  j["micro_batches"] = state.micro_batches;
  j["tokens_total"] = state.tokens_total;
  j["elapsed_s"] = state.elapsed_s;
  j["seed"] = state.seed;
  j["tuner_type"] = state.tuner_type;
  j["data_fingerprint"] = state.data_fingerprint;
  j["items_per_epoch"] = state.items_per_epoch;
  j["last_loss"] = state.last_loss;
  j["lr_scheduler"] = {{"type", engine.options().schedule.type},
                       {"base_lr", engine.options().schedule.base_lr},
                       {"warmup_steps", engine.options().schedule.warmup_steps},
                       {"total_steps", engine.options().schedule.total_steps}};
  // transformers' TrainerState, so HF tools (and TrainerState.load_from_json) read the
  // checkpoint's progress and log history.
  {
    const HfTrainerInfo& hf = state.hf;
    nlohmann::ordered_json h;
    h["best_global_step"] = nullptr;
    h["best_metric"] = nullptr;
    h["best_model_checkpoint"] = nullptr;
    h["epoch"] = hf.epoch;
    h["eval_steps"] = hf.eval_steps;
    h["global_step"] = state.step;
    h["is_hyper_param_search"] = false;
    h["is_local_process_zero"] = true;
    h["is_world_process_zero"] = true;
    nlohmann::ordered_json log = nlohmann::ordered_json::array();
    for (const auto& e : hf.log_history) {
      nlohmann::ordered_json x;
      x["epoch"] = e.epoch;
      if (e.eval) {
        x["eval_loss"] = e.loss;
      } else {
        x["grad_norm"] = e.grad_norm;
        x["learning_rate"] = e.learning_rate;
        x["loss"] = e.loss;
        x["num_input_tokens_seen"] = e.num_input_tokens_seen;
      }
      x["step"] = e.step;
      log.push_back(std::move(x));
    }
    h["log_history"] = std::move(log);
    h["logging_steps"] = hf.logging_steps;
    h["max_steps"] = state.total_steps;
    h["num_input_tokens_seen"] = state.tokens_total;
    h["num_train_epochs"] = hf.num_train_epochs;
    h["save_steps"] = hf.save_steps;
    h["stateful_callbacks"] = nlohmann::ordered_json::object();
    h["total_flos"] = 0.0;
    h["train_batch_size"] = hf.train_batch_size;
    h["trial_name"] = nullptr;
    h["trial_params"] = nullptr;
    if (!write_text(tmp / "trainer_state.json", dump_json(h, 2) + "\n"))
      return fail({error_at((tmp / "trainer_state.json").string(), {}, "cannot be written (disk full?)")});
  }
  // Sizes and checksums of every other file, checked at resume (validate_resume_source).
  auto files = list_files(tmp);
  if (!files.ok()) return fail(files.diagnostics);
  nlohmann::ordered_json listed = nlohmann::ordered_json::object();
  for (const auto& f : files.value) listed[f.name] = {{"bytes", f.bytes}, {"checksum64", f.checksum64}};
  j["files"] = std::move(listed);
  if (!write_text(tmp / kOdysseyStateFile, dump_json(j, 2) + "\n"))
    return fail({error_at((tmp / kOdysseyStateFile).string(), {}, "cannot be written (disk full?)")});
  std::int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(tmp, ec)) {
    if (!e.is_regular_file()) continue;
    bytes += static_cast<std::int64_t>(e.file_size());
    if (!sync_path(e.path(), false)) return fail({error_at(e.path().string(), {}, "cannot be synced to disk")});
  }
  sync_path(tmp, true);
  if (!rename_no_replace(tmp, final_dir, ec))
    return fail({error_at(final_dir.string(), {},
                          ec == std::errc::file_exists || ec == std::errc::directory_not_empty
                              ? std::string("already exists; a checkpoint is never replaced (is another run "
                                            "writing this run directory?)")
                              : "cannot rename the finished checkpoint into place: " + ec.message())});
  sync_path(final_dir.parent_path(), true);
  r.value = bytes;
  return r;
}

std::string optimizer_shard_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer-rank-%05d-of-%05d.safetensors", rank, world);
  return buf;
}

Result<std::int64_t> save_optimizer_shard(const fs::path& file, StepEngine& engine) {
  Result<std::int64_t> r;
  auto saved = save_safetensors(file.string(), engine.optimizer().state());
  if (!saved.ok()) {
    r.diagnostics = saved.diagnostics;
    std::error_code ignore;
    fs::remove(file, ignore);
    return r;
  }
  if (!sync_path(file, false)) {
    r.diagnostics.push_back(error_at(file.string(), {}, "cannot be synced to disk"));
    return r;
  }
  std::error_code ec;
  r.value = static_cast<std::int64_t>(fs::file_size(file, ec));
  return r;
}

namespace {

// trainer_state.json's log_history where the file is transformers' TrainerState (entries
// without a step or with other keys than Odyssey writes are kept as far as they map).
void read_hf_log_history(const fs::path& file, HfTrainerInfo& hf) {
  std::string text, why;
  if (!read_regular_file(file.string(), std::uint64_t{64} << 20, &text, &why)) return;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("global_step")) return;
  const auto log = j.find("log_history");
  if (log == j.end() || !log->is_array()) return;
  auto num = [](const nlohmann::json& o, const char* k) {
    const auto it = o.find(k);
    return it != o.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  for (const auto& x : *log) {
    if (!x.is_object() || !x.contains("step") || !x["step"].is_number_integer()) continue;
    HfLogEntry e;
    e.step = x["step"].get<std::int64_t>();
    e.epoch = num(x, "epoch");
    e.eval = x.contains("eval_loss");
    if (!e.eval && !x.contains("loss")) continue;  // a train summary (train_runtime …): HF writes it at the end
    e.loss = num(x, e.eval ? "eval_loss" : "loss");
    e.learning_rate = num(x, "learning_rate");
    e.grad_norm = num(x, "grad_norm");
    e.num_input_tokens_seen = static_cast<std::int64_t>(num(x, "num_input_tokens_seen"));
    hf.log_history.push_back(e);
  }
}

}  // namespace

Result<TrainerState> read_trainer_state(const fs::path& dir) {
  Result<TrainerState> r;
  // Odyssey's state: odyssey_state.json; before it, the same content as trainer_state.json.
  std::error_code ec;
  const bool own = fs::exists(dir / kOdysseyStateFile, ec);
  const fs::path file = dir / (own ? kOdysseyStateFile : "trainer_state.json");
  std::string text, why;
  if (!read_regular_file(file.string(), std::uint64_t{64} << 20, &text, &why)) {
    r.diagnostics.push_back(error_at((dir / kOdysseyStateFile).string(), {},
                                     "cannot be read (" + why + "); is " + dir.string() +
                                         " a checkpoint directory of Odyssey (checkpoints/checkpoint-<step>)?"));
    return r;
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.diagnostics.push_back(error_at(file.string(), {}, "is not a JSON object"));
    return r;
  }
  if (const auto hf = own ? std::nullopt : hf_trainer_checkpoint_problem(j, dir.string())) {
    r.diagnostics.push_back(error_at(file.string(), {}, *hf));
    return r;
  }
  if (own) read_hf_log_history(dir / "trainer_state.json", r.value.hf);
  auto get = [&](const char* key, auto& field) {
    auto it = j.find(key);
    if (it == j.end()) {
      r.diagnostics.push_back(error_at(file.string(), key, "missing"));
      return;
    }
    try {
      it->get_to(field);
    } catch (const nlohmann::json::exception&) {
      r.diagnostics.push_back(error_at(file.string(), key, "has the wrong type"));
    }
  };
  TrainerState& s = r.value;
  get("step", s.step);
  get("total_steps", s.total_steps);
  get("micro_batches", s.micro_batches);
  get("tokens_total", s.tokens_total);
  get("elapsed_s", s.elapsed_s);
  get("seed", s.seed);
  get("tuner_type", s.tuner_type);
  get("data_fingerprint", s.data_fingerprint);
  get("items_per_epoch", s.items_per_epoch);
  get("last_loss", s.last_loss);
  if (auto files = j.find("files"); files != j.end()) {
    s.has_file_list = true;
    if (!files->is_object()) {
      r.diagnostics.push_back(error_at(file.string(), "files", "is not an object of file name -> {bytes, checksum64}"));
      return r;
    }
    for (const auto& [name, entry] : files->items()) {
      SavedFile f;
      f.name = name;
      const auto bytes = entry.is_object() ? entry.find("bytes") : entry.end();
      const auto sum = entry.is_object() ? entry.find("checksum64") : entry.end();
      if (!entry.is_object() || bytes == entry.end() || !bytes->is_number_integer() || sum == entry.end() ||
          !sum->is_string()) {
        r.diagnostics.push_back(error_at(file.string(), "files." + name,
                                         "expected {\"bytes\": <integer>, \"checksum64\": <16 hex digits>}"));
        continue;
      }
      f.bytes = bytes->get<std::int64_t>();
      f.checksum64 = sum->get<std::string>();
      s.files.push_back(std::move(f));
    }
  }
  return r;
}

std::optional<std::string> file_checksum64(const fs::path& file, std::string* error) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (error) *error = std::strerror(errno);
    return std::nullopt;
  }
  // Four independent lanes of xor-multiply-rotate over 8-byte words keep the multiplier busy
  // (one lane would wait on each product); the tail and the length are folded in at the end.
  constexpr std::uint64_t kMul[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull,
                                     0xd6e8feb86659fd93ull};
  std::uint64_t lane[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
  auto rotl = [](std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  std::vector<unsigned char> buf(1 << 20);
  std::uint64_t total = 0;
  std::size_t have = 0;  // bytes in buf not yet consumed (under 32, carried to the next read)
  for (;;) {
    const ssize_t n = ::read(fd, buf.data() + have, buf.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (error) *error = std::strerror(errno);
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    total += static_cast<std::uint64_t>(n);
    have += static_cast<std::size_t>(n);
    std::size_t at = 0;
    for (; at + 32 <= have; at += 32) {
      for (int k = 0; k < 4; ++k) {
        std::uint64_t w;
        std::memcpy(&w, buf.data() + at + 8 * k, 8);
        lane[k] = rotl((lane[k] ^ w) * kMul[k], 29);
      }
    }
    std::memmove(buf.data(), buf.data() + at, have - at);
    have -= at;
  }
  ::close(fd);
  std::uint64_t h = total * kMul[0];
  for (int k = 0; k < 4; ++k) h = rotl((h ^ lane[k]) * kMul[(k + 1) % 4], 31);
  for (std::size_t i = 0; i < have; ++i) h = (h ^ buf[i]) * kMul[i % 4];
  h ^= h >> 32;
  h *= kMul[3];
  h ^= h >> 29;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string(hex);
}

Diagnostics validate_resume_source(const fs::path& dir, const TrainerState& s, std::int64_t total_steps,
                                   std::int64_t accumulation) {
  Diagnostics d;
  std::error_code own_ec;
  const std::string state_file =
      (dir / (fs::exists(dir / kOdysseyStateFile, own_ec) ? kOdysseyStateFile : "trainer_state.json")).string();
  const std::string name = dir.filename().string();
  if (name.find(".tmp-") != std::string::npos || name.starts_with(".")) {
    d.push_back(error_at(dir.string(), "resume_from_checkpoint",
                         "is the temporary directory of a checkpoint save that did not finish (it is renamed "
                         "to checkpoint-<step> only when complete); resume from a checkpoint-<step> directory"));
    return d;
  }
  if (s.step < 0 || s.step > total_steps)
    d.push_back(error_at(state_file, "step",
                         "found " + std::to_string(s.step) + "; expected a completed step count from 0 to " +
                             std::to_string(total_steps) + " (this run's total steps)"));
  // Every step consumes gradient_accumulation_steps micro-batches, so the data position
  // follows from the step (overflow-safe: step is bounded above when this is reached).
  else if (s.micro_batches != s.step * accumulation)
    d.push_back(error_at(state_file, "micro_batches",
                         "found " + std::to_string(s.micro_batches) + "; expected " +
                             std::to_string(s.step * accumulation) + " (step " + std::to_string(s.step) +
                             " x gradient_accumulation_steps " + std::to_string(accumulation) + ")"));
  if (s.tokens_total < 0)
    d.push_back(error_at(state_file, "tokens_total",
                         "found " + std::to_string(s.tokens_total) + "; expected a token count >= 0"));
  if (!s.has_file_list) {
    Diagnostic w = error_at(state_file, "files",
                            "has no file list (a checkpoint of an older Odyssey): its files' sizes and checksums "
                            "are not verified");
    w.severity = Severity::Warning;
    d.push_back(std::move(w));
    return d;
  }
  for (const auto& f : s.files) {
    const fs::path p = dir / f.name;
    std::error_code ec;
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "." || f.name == "..") {
      d.push_back(error_at(state_file, "files", "names " + f.name + "; expected a file name inside the checkpoint"));
      continue;
    }
    const auto st = fs::symlink_status(p, ec);
    if (!fs::is_regular_file(st)) {
      d.push_back(error_at(p.string(), "files." + f.name,
                           std::string(fs::exists(st) ? "is not a regular file" : "is missing") + "; " +
                               fs::path(state_file).filename().string() + " lists it with " + std::to_string(f.bytes) +
                               " bytes"));
      continue;
    }
    const auto size = static_cast<std::int64_t>(fs::file_size(p, ec));
    if (size != f.bytes) {
      d.push_back(error_at(p.string(), "files." + f.name + ".bytes",
                           "has " + std::to_string(size) + " bytes; " + fs::path(state_file).filename().string() +
                               " expects " + std::to_string(f.bytes) + " (truncated or replaced since the save?)"));
      continue;
    }
    std::string error;
    const auto sum = file_checksum64(p, &error);
    if (!sum) d.push_back(error_at(p.string(), "files." + f.name, "cannot be read: " + error));
    else if (*sum != f.checksum64)
      d.push_back(error_at(p.string(), "files." + f.name + ".checksum64",
                           "has checksum64 " + *sum + "; " + fs::path(state_file).filename().string() + " expects " +
                               f.checksum64 + " (the file changed since the save)"));
  }
  return d;
}

Diagnostics load_checkpoint(const fs::path& dir, StepEngine& engine, const CheckpointContents& what) {
  Diagnostics d;
  if (what.lora) {
    d = load_adapter_weights(engine.model(), dir.string());
  } else {
    auto ck = SafetensorsCheckpoint::open(dir.string());
    if (!ck.ok()) return ck.diagnostics;
    d = model::load_weights(engine.model(), ck.value, dir.string());
  }
  if (has_errors(d)) return d;
  std::error_code ec;
  const bool sharded = engine.optimizer().sharded_state();
  const std::string opt_file =
      (dir / (sharded ? optimizer_shard_name(what.rank, what.world) : std::string("optimizer.safetensors"))).string();
  // Every rank looks for every rank's file and words the answer the same way: a mismatch is
  // the run's, not one rank's, and the launcher reports whichever rank exits first (rank 0,
  // which writes status.json and run_end before its last line, is often not that one).
  bool all_shards = sharded;
  for (int r = 0; sharded && r < what.world; ++r)
    all_shards = all_shards && fs::exists(dir / optimizer_shard_name(r, what.world));
  if (sharded && !all_shards) {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().starts_with("optimizer")) found.push_back(e.path().filename().string());
    std::sort(found.begin(), found.end());
    std::string has;
    for (const auto& f : found) has += (has.empty() ? "" : ", ") + f;
    const std::string needs = what.world == 1 ? optimizer_shard_name(0, 1)
                                              : optimizer_shard_name(0, what.world) + " to " +
                                                    optimizer_shard_name(what.world - 1, what.world);
    return {error_at(dir.string(), {},
                     "this run shards its optimizer state over " + std::to_string(what.world) +
                         " ranks and needs one file per rank, " + needs + "; the checkpoint has " +
                         (has.empty() ? std::string("none") : has) +
                         " (resume with the number of processes it was saved with)")};
  }
  if (!sharded && !fs::exists(opt_file)) {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().starts_with("optimizer-rank-"))
        return {error_at(opt_file, {},
                         "is missing: the checkpoint holds sharded ZeRO optimizer state (" +
                             e.path().filename().string() +
                             "); resume with the zero_stage and process count it was "
                             "saved with")};
  }
  auto opt = SafetensorsFile::open(opt_file);
  if (!opt.ok()) return opt.diagnostics;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& n : opt.value->names()) {
    auto t = opt.value->load_as_stored(n);
    if (!t.ok()) return t.diagnostics;
    named.emplace_back(n, t.value);
  }
  d = engine.optimizer().load_state(named, opt_file);
  if (has_errors(d)) return d;
  const auto cpu = read_bytes(dir / "rng_cpu.bin");
  if (!cpu) return {error_at((dir / "rng_cpu.bin").string(), {}, "cannot be read")};
  at::Generator cpu_gen = at::detail::getDefaultCPUGenerator();
  try {
    cpu_gen.set_state(*cpu);
    const torch::Device device = engine.model()->options().device;
    if (device.is_cuda()) {
      if (const auto cuda = read_bytes(dir / "rng_cuda.bin")) {
        at::Generator cuda_gen = at::globalContext().defaultGenerator(device);
        cuda_gen.set_state(*cuda);
      }
    }
  } catch (const c10::Error& e) {
    return {error_at((dir / "rng_cpu.bin").string(), {},
                     std::string("is not a generator state of this LibTorch: ") + e.what_without_backtrace())};
  }
  return d;
}

std::vector<fs::path> rotate_checkpoints(const fs::path& checkpoints_dir, std::int64_t keep) {
  std::vector<fs::path> removed;
  if (keep <= 0) return removed;
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.starts_with("checkpoint-")) continue;
    const std::string digits = name.substr(11);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;  // .tmp-… and others
    found.emplace_back(std::stoll(digits), e.path());
  }
  std::sort(found.begin(), found.end());
  while (static_cast<std::int64_t>(found.size()) > keep) {
    fs::remove_all(found.front().second, ec);
    removed.push_back(found.front().second);
    found.erase(found.begin());
  }
  return removed;
}

}  // namespace odyssey::train
