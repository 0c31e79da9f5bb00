#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "common/json_dump.h"
#include "common/regular_file.h"

namespace odyssey {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace fs = std::filesystem;

namespace {

// Source bytes converted per step of load(): bounds the extra memory of a load (mapped
// source pages on the CPU, a staging buffer on the GPU) independently of the tensor size.
constexpr std::int64_t kChunkBytes = 16 << 20;

std::string errno_text() { return std::strerror(errno); }

std::string dtype_text(torch::Dtype d) {
  if (auto s = from_torch_dtype(d)) return dtype_name(*s);
  return std::string(c10::toString(d));
}

// Advice over [p, p + n), widened to whole pages; the mapping is read-only and clean, so
// dropping pages only means they are read again from the page cache if touched again.
void advise(const char* p, std::int64_t n, int advice) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (n <= 0) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(p) & ~(page - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(n);
  ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

}  // namespace

namespace {
using S = SafetensorsDtype;
const std::pair<torch::Dtype, SafetensorsDtype> kTorchDtypes[] = {
    {torch::kBFloat16, S::BF16}, {torch::kHalf, S::F16}, {torch::kFloat, S::F32}, {torch::kDouble, S::F64},
    {torch::kLong, S::I64},      {torch::kInt, S::I32},  {torch::kShort, S::I16}, {torch::kChar, S::I8},
    {torch::kByte, S::U8},       {torch::kBool, S::BOOL}};
}  // namespace

std::optional<torch::Dtype> to_torch_dtype(SafetensorsDtype d) {
  for (const auto& [t, s] : kTorchDtypes)
    if (s == d && dtype_supported(d)) return t;
  return std::nullopt;
}

std::optional<SafetensorsDtype> from_torch_dtype(torch::Dtype d) {
  for (const auto& [t, s] : kTorchDtypes)
    if (t == d) return s;
  return std::nullopt;
}

// ---- reading ---------------------------------------------------------------------------

struct SafetensorsFile::Mapping {  // owned through a shared_ptr, never copied
  char* addr = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, size);
  }
};

Result<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  Result<std::shared_ptr<const SafetensorsFile>> r;
  // A FIFO, device or socket is refused before it is opened (open(2) of a FIFO waits for a
  // writer: `run` hung there while its heartbeat said alive); see common/regular_file.h.
  std::string why;
  const int fd = open_regular_file(path, &why);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0) why = errno_text(), ::close(fd);
    r.diagnostics.push_back(error_at(path, "", "cannot open the weights file: " + why));
    return r;
  }
  auto map = std::make_shared<Mapping>();
  map->size = static_cast<std::size_t>(st.st_size);
  if (map->size > 0) {
    void* p = ::mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      r.diagnostics.push_back(error_at(path, "", "cannot map the file: " + errno_text()));
      ::close(fd);
      return r;
    }
    map->addr = static_cast<char*>(p);
  }
  ::close(fd);  // the mapping keeps the file open
  auto header = parse_safetensors_header(std::string_view(map->addr, map->size), map->size, path);
  r.diagnostics = std::move(header.diagnostics);
  if (!r.ok()) return r;
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path, f->header_ = std::move(header.value), f->map_ = std::move(map);
  r.value = std::move(f);
  return r;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_.tensors.size());
  for (const auto& t : header_.tensors) out.push_back(t.name);
  return out;
}

Diagnostic SafetensorsFile::error(const std::string& tensor, std::string message) const {
  return error_at(path_, tensor, std::move(message));
}

const char* SafetensorsFile::data_of(const SafetensorsTensorInfo& t) const {
  return map_->addr + header_.data_start() + t.begin;
}

Result<const SafetensorsTensorInfo*> SafetensorsFile::loadable(std::string_view name,
                                                               std::optional<torch::Dtype> target) const {
  Result<const SafetensorsTensorInfo*> r;
  const auto* t = info(name);
  if (t == nullptr) r.diagnostics.push_back(error(std::string(name), "no tensor of this name in the file"));
  else if (!to_torch_dtype(t->dtype))
    r.diagnostics.push_back(error(t->name, std::string("dtype ") + dtype_name(t->dtype) +
                                               " is not supported; Odyssey loads " + supported_dtypes_text()));
  else if (target && !c10::isFloatingType(*target))
    r.diagnostics.push_back(
        error(t->name, "cannot load into " + dtype_text(*target) + ": the target dtype must be a floating-point type"));
  else r.value = t;
  return r;
}

Result<torch::Tensor> SafetensorsFile::view(std::string_view name) const {
  auto t = loadable(name, std::nullopt);
  if (!t.ok()) return {torch::Tensor(), std::move(t.diagnostics)};
  const auto& info = *t.value;
  const auto options = torch::TensorOptions().dtype(*to_torch_dtype(info.dtype));
  const char* p = data_of(info);
  if (reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(dtype_bits(info.dtype) / 8) != 0) {
    torch::Tensor copy = torch::empty(info.shape, options);
    std::memcpy(copy.data_ptr(), p, info.nbytes());
    return {copy, {}};
  }
  // from_blob wants a mutable pointer; the pages are read-only (see the header comment).
  return {torch::from_blob(
              const_cast<char*>(p), info.shape, [keep = map_](void*) mutable { keep.reset(); }, options),
          {}};
}

namespace {
// Dtypes a checkpoint's optimizer state may hold besides the weights' floating types.
std::optional<torch::Dtype> state_dtype(SafetensorsDtype d) {
  if (auto t = to_torch_dtype(d)) return t;
  switch (d) {
    case SafetensorsDtype::I64: return torch::kLong;
    case SafetensorsDtype::I32: return torch::kInt;
    case SafetensorsDtype::U8: return torch::kByte;
    default: return std::nullopt;
  }
}
}  // namespace

Result<torch::Tensor> SafetensorsFile::load_as_stored(std::string_view name) const {
  const auto* t = info(name);
  if (t == nullptr) return {torch::Tensor(), {error(std::string(name), "no tensor of this name in the file")}};
  const auto dtype = state_dtype(t->dtype);
  if (!dtype)
    return {torch::Tensor(),
            {error(t->name, std::string("dtype ") + dtype_name(t->dtype) +
                                " is not an optimizer-state dtype (BF16, F16, F32, I64, I32, U8)")}};
  torch::Tensor out = torch::empty(t->shape, torch::TensorOptions().dtype(*dtype));
  std::memcpy(out.data_ptr(), data_of(*t), t->nbytes());
  return {out, {}};
}

Result<torch::Tensor> SafetensorsFile::load(std::string_view name, torch::Dtype dtype,
                                            const torch::Device& device) const {
  auto t = loadable(name, dtype);
  if (!t.ok()) return {torch::Tensor(), std::move(t.diagnostics)};
  torch::Tensor out = torch::empty(t.value->shape, torch::TensorOptions().dtype(dtype).device(device));
  fill(*t.value, out);
  return {out, {}};
}

Diagnostics SafetensorsFile::load_into(std::string_view name, torch::Tensor& dst) const {
  if (!dst.defined()) return {error(std::string(name), "the destination tensor is undefined")};
  auto t = loadable(name, dst.scalar_type());
  if (!t.ok()) return t.diagnostics;
  if (dst.sizes().vec() != t.value->shape)
    return {error(t.value->name, "shape " + shape_string(t.value->shape) + " in the file, but the destination has " +
                                     shape_string(dst.sizes().vec()))};
  if (!dst.is_contiguous()) return {error(t.value->name, "the destination tensor is not contiguous")};
  fill(*t.value, dst);
  return {};
}

void SafetensorsFile::fill(const SafetensorsTensorInfo& info, torch::Tensor& dst) const {
  torch::NoGradGuard no_grad;  // dst may be a parameter
  const torch::Dtype src_dtype = *to_torch_dtype(info.dtype);
  const torch::Tensor flat = dst.view({-1});
  const std::int64_t numel = info.numel();
  const std::int64_t itemsize = dtype_bits(info.dtype) / 8;
  const std::int64_t step = kChunkBytes / itemsize;
  const char* base = data_of(info);
  const bool aligned = reinterpret_cast<std::uintptr_t>(base) % static_cast<std::uintptr_t>(itemsize) == 0;
  const auto src_options = torch::TensorOptions().dtype(src_dtype);
  for (std::int64_t at = 0; at < numel; at += step) {
    const std::int64_t n = std::min(step, numel - at);
    const char* p = base + at * itemsize;
    if (at + n < numel) advise(p + n * itemsize, std::min(step, numel - at - n) * itemsize, MADV_WILLNEED);
    torch::Tensor src;
    if (aligned) {
      src = torch::from_blob(const_cast<char*>(p), {n}, src_options);
    } else {
      src = torch::empty({n}, src_options);
      std::memcpy(src.data_ptr(), p, static_cast<std::size_t>(n * itemsize));
    }
    torch::Tensor part = flat.narrow(0, at, n);
    if (dst.is_cpu() || src_dtype == dst.scalar_type())
      part.copy_(src);                      // CPU: converts in place; to a device: one copy of the file's bytes
    else part.copy_(src.to(dst.device()));  // to the device in the file's dtype, converted there
    advise(p, n * itemsize, MADV_DONTNEED);
  }
}

// ---- checkpoints -------------------------------------------------------------------------

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& path) {
  Result<SafetensorsCheckpoint> r;
  auto& ck = r.value;
  auto& diags = r.diagnostics;
  ck.path_ = path;
  auto found = find_safetensors_files(path);
  diags = std::move(found.diagnostics);
  if (!r.ok()) return r;
  const auto& index = found.value.index;
  const std::string& index_path = found.value.source;
  ck.source_ = found.value.source;
  for (const auto& f : found.value.files) {
    auto opened = SafetensorsFile::open(f);
    for (auto& d : opened.diagnostics) diags.push_back(std::move(d));
    if (opened.value) ck.files_.push_back(std::move(opened.value));
  }
  if (!r.ok()) return r;

  for (std::size_t i = 0; i < ck.files_.size(); ++i) {
    const auto& file = *ck.files_[i];
    const std::string shard = fs::path(file.path()).filename().string();
    for (const auto& t : file.header().tensors) {
      if (index) {
        const auto it = index->weight_map.find(t.name);
        if (it == index->weight_map.end()) {
          diags.push_back(error_at(file.path(), t.name, "the tensor is in this shard but not in " + index_path));
          continue;
        }
        if (it->second != shard) continue;  // reported below, from the index's side
      }
      if (!ck.where_.emplace(t.name, i).second)
        diags.push_back(error_at(file.path(), t.name, "the tensor is also in " + ck.files_[ck.where_[t.name]]->path()));
    }
  }
  if (index) {
    for (const auto& [name, shard] : index->weight_map) {
      if (ck.where_.count(name)) continue;
      diags.push_back(
          error_at(index_path, name, "the index puts the tensor in '" + shard + "', which does not contain it"));
    }
    if (index->total_size && r.ok() && *index->total_size != ck.tensor_bytes())
      diags.push_back(
          {Severity::Warning, index_path, 0, 0, "metadata.total_size",
           std::to_string(*index->total_size) + " bytes, but the tensors hold " + std::to_string(ck.tensor_bytes())});
  }
  if (!r.ok()) return r;
  ck.names_.reserve(ck.where_.size());
  for (const auto& [name, i] : ck.where_) ck.names_.push_back(name);
  std::sort(ck.names_.begin(), ck.names_.end());
  return r;
}

void SafetensorsCheckpoint::rename(const std::function<std::string(const std::string&)>& name_of) {
  std::vector<std::string> names;
  std::unordered_map<std::string, std::string> stored;
  hidden_.clear();
  for (const auto& [was, i] : where_) {  // where_ keeps the stored names
    const std::string now = name_of(was);
    if (now.empty()) {
      hidden_.push_back(was);
      continue;
    }
    stored.emplace(now, was);
    names.push_back(now);
  }
  std::sort(names.begin(), names.end());
  std::sort(hidden_.begin(), hidden_.end());
  names_ = std::move(names);
  stored_ = std::move(stored);
}

std::string SafetensorsCheckpoint::stored_name(std::string_view name) const {
  if (stored_.empty() && hidden_.empty()) return std::string(name);
  const auto it = stored_.find(std::string(name));
  return it == stored_.end() ? std::string() : it->second;
}

const SafetensorsFile* SafetensorsCheckpoint::holder(std::string_view name) const {
  const auto it = where_.find(stored_name(name));
  return it == where_.end() ? nullptr : files_[it->second].get();
}

Diagnostic SafetensorsCheckpoint::missing(std::string_view name) const {
  return error_at(path_, std::string(name), "no tensor of this name in the checkpoint");
}

const SafetensorsTensorInfo* SafetensorsCheckpoint::info(std::string_view name) const {
  const auto* f = holder(name);
  return f ? f->info(stored_name(name)) : nullptr;
}

std::string SafetensorsCheckpoint::file_of(std::string_view name) const {
  const auto* f = holder(name);
  return f ? f->path() : std::string();
}

Diagnostics SafetensorsCheckpoint::load_into(std::string_view name, torch::Tensor& dst) const {
  const auto* f = holder(name);
  return f ? f->load_into(stored_name(name), dst) : Diagnostics{missing(name)};
}

Result<torch::Tensor> SafetensorsCheckpoint::view(std::string_view name) const {
  const auto* f = holder(name);
  return f ? f->view(stored_name(name)) : Result<torch::Tensor>{torch::Tensor(), {missing(name)}};
}

Result<torch::Tensor> SafetensorsCheckpoint::load(std::string_view name, torch::Dtype dtype,
                                                  const torch::Device& device) const {
  const auto* f = holder(name);
  return f ? f->load(stored_name(name), dtype, device) : Result<torch::Tensor>{torch::Tensor(), {missing(name)}};
}

std::uint64_t SafetensorsCheckpoint::tensor_bytes() const {
  std::uint64_t n = 0;
  for (const auto& f : files_) n += f->header().data_length;
  return n;
}

// ---- writing -------------------------------------------------------------------------------

namespace {

// The mode a new file gets from open(2) with 0666: what the process umask leaves. Read from
// /proc/self/status ("Umask:", Linux 4.7+) rather than by setting and restoring the umask,
// which would race with other threads creating files; 022 when neither says.
mode_t new_file_mode() {
  std::ifstream status("/proc/self/status");
  std::string key, value;
  while (status >> key >> value)
    if (key == "Umask:") return static_cast<mode_t>(0666 & ~std::stoul(value, nullptr, 8));
  return 0644;
}

// A file written under a temporary name beside `path` and renamed over it on commit();
// abandoned (unlinked) otherwise, so that readers see the old file or the whole new one.
// mkstemp creates it 0600; it gets the mode a plainly created file would (0644 under the
// usual umask 022), so checkpoints and exports are readable as the other files beside them.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp-XXXXXX") {
    fd_ = ::mkstemp(tmp_.data());
    if (fd_ < 0) fail("cannot create " + tmp_);
    else if (::fchmod(fd_, new_file_mode()) != 0) fail("cannot set the mode of " + tmp_);
  }
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0 && ok()) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return fail("cannot write " + tmp_);
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  void commit() {
    if (ok() && ::fsync(fd_) != 0) fail("cannot sync " + tmp_);
    if (fd_ >= 0 && ::close(fd_) != 0 && ok()) fail("cannot close " + tmp_);
    fd_ = -1;
    if (ok() && ::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename " + tmp_ + " to " + path_);
    committed_ = ok();
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  void fail(const std::string& what) {
    if (error_.empty()) error_ = what + ": " + errno_text();
  }
  std::string path_, tmp_, error_;
  int fd_ = -1;
  bool committed_ = false;
};

std::int64_t nbytes_of(const torch::Tensor& t) { return t.numel() * static_cast<std::int64_t>(t.element_size()); }

// The checks shared by both writers; diagnostics name `file` and the tensor.
Diagnostics check_tensors(const NamedTensors& tensors, const std::string& file) {
  Diagnostics d;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) d.push_back(error_at(file, name, "the tensor is undefined"));
    else if (!from_torch_dtype(t.scalar_type()) || !state_dtype(*from_torch_dtype(t.scalar_type())))
      d.push_back(error_at(file, name,
                           "dtype " + dtype_text(t.scalar_type()) + " cannot be written; Odyssey writes " +
                               supported_dtypes_text() + " (and I64, I32, U8 for optimizer state)"));
    if (name == "__metadata__") d.push_back(error_at(file, name, "the name is reserved for the file's metadata"));
    if (!seen.insert(name).second) d.push_back(error_at(file, name, "the name is given twice"));
  }
  return d;
}

std::map<std::string, std::string> with_format(std::map<std::string, std::string> metadata) {
  metadata.emplace("format", "pt");
  return metadata;
}

}  // namespace

Result<std::uint64_t> save_safetensors(const std::string& path, const NamedTensors& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  Result<std::uint64_t> r;
  r.diagnostics = check_tensors(tensors, path);
  if (!r.ok()) return r;
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return tensors[a].second.element_size() > tensors[b].second.element_size();
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = with_format(metadata);
  std::uint64_t offset = 0;
  for (const auto i : order) {
    const auto& [name, t] = tensors[i];
    const auto end = offset + static_cast<std::uint64_t>(nbytes_of(t));
    header[name] = {{"dtype", dtype_name(*from_torch_dtype(t.scalar_type()))},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  // Metadata that is not UTF-8 (a model path with byte 0xFF) is written with U+FFFD, as
  // every JSON Odyssey writes: a checkpoint must not fail over a label.
  std::string text = dump_json(header);
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the reference pads the header to 8 bytes
  if (text.size() > kMaxSafetensorsHeaderBytes) {
    r.diagnostics.push_back(error_at(path, "", "the header would be over the format's limit"));
    return r;
  }
  AtomicFile out(path);
  std::uint64_t n = text.size();
  out.write(&n, sizeof n);
  out.write(text.data(), text.size());
  for (const auto i : order) {
    // Contiguous CPU tensors are written from their memory; device tensors go to the host
    // one chunk at a time (non-contiguous ones are made contiguous on their device first).
    const torch::Tensor flat = tensors[i].second.detach().reshape({-1});
    const std::int64_t step = kChunkBytes / static_cast<std::int64_t>(flat.element_size());
    for (std::int64_t at = 0; at < flat.numel() && out.ok(); at += step) {
      const auto chunk = flat.narrow(0, at, std::min(step, flat.numel() - at)).to(torch::kCPU).contiguous();
      out.write(chunk.data_ptr(), static_cast<std::size_t>(nbytes_of(chunk)));
    }
  }
  out.commit();
  if (!out.ok()) {
    r.diagnostics.push_back(error_at(path, "", out.error()));
    return r;
  }
  r.value = 8 + text.size() + offset;
  return r;
}

Result<std::vector<std::string>> save_sharded(const std::string& dir, const NamedTensors& tensors,
                                              std::uint64_t max_shard_bytes,
                                              const std::map<std::string, std::string>& metadata) {
  Result<std::vector<std::string>> r;
  const fs::path d(dir);
  const std::string index_path = (d / "model.safetensors.index.json").string();
  r.diagnostics = check_tensors(tensors, dir);
  std::error_code ec;
  fs::create_directories(d, ec);
  if (ec) r.diagnostics.push_back(error_at(dir, "", "cannot create the directory: " + ec.message()));
  if (!r.ok()) return r;
  // Fill shards in order, as huggingface_hub's split_torch_state_dict_into_shards does.
  std::vector<NamedTensors> shards;
  std::uint64_t filled = 0, total = 0;
  std::int64_t parameters = 0;
  for (const auto& nt : tensors) {
    const auto n = static_cast<std::uint64_t>(nbytes_of(nt.second));
    if (shards.empty() || (filled > 0 && filled + n > max_shard_bytes)) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(nt);
    filled += n;
    total += n;
    parameters += nt.second.numel();
  }
  if (shards.empty()) shards.emplace_back();
  const int count = static_cast<int>(shards.size());
  std::map<std::string, std::string> weight_map;
  for (int i = 0; i < count; ++i) {
    const std::string name = count == 1 ? "model.safetensors" : safetensors_shard_name(i + 1, count);
    auto w = save_safetensors((d / name).string(), shards[static_cast<std::size_t>(i)], metadata);
    for (auto& x : w.diagnostics) r.diagnostics.push_back(std::move(x));
    if (!w.ok()) return r;
    r.value.push_back(name);
    for (const auto& [t, _] : shards[static_cast<std::size_t>(i)]) weight_map.emplace(t, name);
  }
  if (count > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_parameters", parameters}, {"total_size", total}}},
                                          {"weight_map", weight_map}};
    const std::string text = dump_json(index, 2) + "\n";
    AtomicFile out(index_path);
    out.write(text.data(), text.size());
    out.commit();
    if (!out.ok()) {
      r.diagnostics.push_back(error_at(index_path, "", out.error()));
      return r;
    }
    r.value.push_back("model.safetensors.index.json");
  }
  // An earlier save's files would shadow (model.safetensors wins over an index) or clutter.
  static const std::regex shard_re("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  const std::set<std::string> keep(r.value.begin(), r.value.end());
  for (const auto& e : fs::directory_iterator(d, ec)) {
    const std::string f = e.path().filename().string();
    const bool weights =
        f == "model.safetensors" || f == "model.safetensors.index.json" || std::regex_match(f, shard_re);
    if (weights && !keep.count(f)) fs::remove(e.path(), ec);
  }
  return r;
}

}  // namespace odyssey
