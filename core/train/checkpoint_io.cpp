#include "train/checkpoint_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <fstream>
#include <sstream>

#include "model/safetensors.h"
#include "model/weights.h"

namespace odyssey::train {
namespace {

namespace fs = std::filesystem;

Diagnostic err(const std::string& file, std::string message, const std::string& key = {}) {
  Diagnostic d;
  d.file = file;
  d.key = key;
  d.message = std::move(message);
  return d;
}

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

std::optional<torch::Tensor> read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

const std::vector<std::string>& model_side_files() {
  static const std::vector<std::string> files{"config.json", "generation_config.json", "tokenizer.json",
                                              "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                                              "merges.txt", "chat_template.jinja"};
  return files;
}

Result<std::int64_t> save_checkpoint(const fs::path& final_dir, StepEngine& engine, const CheckpointContents& what,
                                     const TrainerState& state) {
  Result<std::int64_t> r;
  std::error_code ec;
  const fs::path tmp = final_dir.parent_path() / (final_dir.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) {
    r.diagnostics.push_back(err(tmp.string(), "cannot create the checkpoint directory: " + ec.message()));
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
      if (ec) return fail({err((tmp / f).string(), "cannot be written: " + ec.message())});
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
      if (ec) return fail({err(shard.string(), "cannot be moved into the checkpoint: " + ec.message())});
    }
  }
  if (!write_bytes(tmp / "rng_cpu.bin", at::detail::getDefaultCPUGenerator().get_state()) ||
      (device.is_cuda() && !write_bytes(tmp / "rng_cuda.bin", at::globalContext().defaultGenerator(device).get_state())))
    return fail({err((tmp / "rng_cpu.bin").string(), "cannot be written (disk full?)")});
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
  if (!write_text(tmp / "trainer_state.json", j.dump(2) + "\n"))
    return fail({err((tmp / "trainer_state.json").string(), "cannot be written (disk full?)")});
  std::int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(tmp, ec)) {
    if (!e.is_regular_file()) continue;
    bytes += static_cast<std::int64_t>(e.file_size());
    if (!sync_path(e.path(), false)) return fail({err(e.path().string(), "cannot be synced to disk")});
  }
  sync_path(tmp, true);
  if (fs::exists(final_dir)) fs::remove_all(final_dir, ec);  // a re-save of the same step
  fs::rename(tmp, final_dir, ec);
  if (ec) return fail({err(final_dir.string(), "cannot rename the finished checkpoint into place: " + ec.message())});
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
    r.diagnostics.push_back(err(file.string(), "cannot be synced to disk"));
    return r;
  }
  std::error_code ec;
  r.value = static_cast<std::int64_t>(fs::file_size(file, ec));
  return r;
}

Result<TrainerState> read_trainer_state(const fs::path& dir) {
  Result<TrainerState> r;
  const fs::path file = dir / "trainer_state.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    r.diagnostics.push_back(err(file.string(), "cannot be read; is " + dir.string() + " a checkpoint directory (checkpoints/checkpoint-<step>)?"));
    return r;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.diagnostics.push_back(err(file.string(), "is not a JSON object"));
    return r;
  }
  auto get = [&](const char* key, auto& field) {
    auto it = j.find(key);
    if (it == j.end()) {
      r.diagnostics.push_back(err(file.string(), "missing", key));
      return;
    }
    try {
      it->get_to(field);
    } catch (const nlohmann::json::exception&) {
      r.diagnostics.push_back(err(file.string(), "has the wrong type", key));
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
  return r;
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
  if (sharded && !fs::exists(opt_file)) {
    std::string found;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().starts_with("optimizer")) found += (found.empty() ? "" : ", ") + e.path().filename().string();
    return {err(opt_file, "is missing: this run shards its optimizer state over " + std::to_string(what.world) +
                              " ranks and needs one file per rank; the checkpoint has " +
                              (found.empty() ? std::string("none") : found) +
                              " (resume with the number of processes it was saved with)")};
  }
  if (!sharded && !fs::exists(opt_file)) {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().starts_with("optimizer-rank-"))
        return {err(opt_file, "is missing: the checkpoint holds sharded ZeRO optimizer state (" +
                                  e.path().filename().string() + "); resume with the zero_stage and process count it was "
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
  if (!cpu) return {err((dir / "rng_cpu.bin").string(), "cannot be read")};
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
    return {err((dir / "rng_cpu.bin").string(), std::string("is not a generator state of this LibTorch: ") +
                                                     e.what_without_backtrace())};
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
