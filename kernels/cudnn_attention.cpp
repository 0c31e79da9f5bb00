#include "kernels/cudnn_attention.h"

#include "kernels/band_attention.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#ifdef ODYSSEY_HAVE_CUDNN_FRONTEND
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <ATen/cuda/CUDAContext.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <bit>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

// cudnn-frontend's dynamic loading reads the library handle from here (cudnn_frontend_shim.h).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace odyssey::kernels {

namespace {

std::atomic<bool> g_on{[] {
  // On unless ODYSSEY_CUDNN_SOFTCAP=0 (measured on an H100, docs/benchmarks.md 2026-12-07).
  const char* v = std::getenv("ODYSSEY_CUDNN_SOFTCAP");
  return !(v && std::string(v) == "0");
}()};
// Windowed rows: on unless ODYSSEY_CUDNN_SOFTCAP_WINDOWED=0 (their selftest rows and Gemma-2's
// model rows measured on an H100, docs/benchmarks.md 2026-12-07, "its windowed layers too").
std::atomic<bool> g_windowed_on{[] {
  const char* v = std::getenv("ODYSSEY_CUDNN_SOFTCAP_WINDOWED");
  return !(v && std::string(v) == "0");
}()};

// A refusal turns its path off for the process: the causal rows' (which windowed rows need too:
// the same rectangles) or the windowed rows' alone (their masked triangles).
struct Failure {
  const char* path;
  std::atomic<bool> failed{false};
  std::string why;
};
Failure g_causal{"cuDNN soft-capped attention", {}, {}};
Failure g_window{"cuDNN soft-capped attention on windowed rows", {}, {}};
std::mutex g_failure_mutex;

[[maybe_unused]] void remember_failure(Failure& f, const std::string& why) {
  std::lock_guard<std::mutex> lock(g_failure_mutex);
  if (!f.failed.exchange(true)) {
    f.why = why;
    std::fprintf(stderr, "odyssey: %s turned off: %s\n", f.path, why.c_str());
  }
}

std::string failure_of(const Failure& f) {
  std::lock_guard<std::mutex> lock(g_failure_mutex);
  return f.why;
}

}  // namespace

void set_cudnn_softcap(bool on) { g_on = on; }
bool cudnn_softcap_enabled() { return g_on.load(); }
void set_cudnn_softcap_windowed(bool on) { g_windowed_on = on; }
bool cudnn_softcap_windowed_enabled() { return g_windowed_on.load(); }

std::string cudnn_softcap_failure() { return failure_of(g_causal); }
std::string cudnn_softcap_window_failure() { return failure_of(g_window); }

std::int64_t softcap_diagonal_block(std::int64_t t, std::int64_t min_block) {
  std::int64_t block = 0;
  for (std::int64_t b = t / 2; b >= min_block && b * 2 <= t; b /= 2) {
    if (t % b != 0 || b % 64 != 0 || ((t / b) & (t / b - 1)) != 0) break;
    block = b;
    if (b % 2 != 0) break;
  }
  return block;
}

std::int64_t softcap_window_block(std::int64_t t, std::int64_t window, std::int64_t max_block) {
  if (window <= 0 || window >= t) return 0;
  for (std::int64_t b = std::min(max_block, window) / 64 * 64; b >= 256; b -= 64)
    if (window % b == 0 && t % b == 0) return b;
  return 0;
}

namespace {

// Sums and merges in fp32 for 16-bit inputs, float64 for float64 (the tests' exact runs).
torch::ScalarType accumulation(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat32;
}

// Merges a part's {o [c, n, hq, d] (its own dtype: read once, cast on the fly), l [c, hq, n]}
// into the rows it covers: out_rows [c, n, hq, d] and lse_rows [c, hq, n], views of the whole's.
void merge_part(const torch::Tensor& out_rows, const torch::Tensor& lse_rows, const torch::Tensor& o,
                const torch::Tensor& l) {
  const torch::Tensor both = torch::logaddexp(lse_rows, l);
  const torch::Tensor w_old = (lse_rows - both).exp_().permute({0, 2, 1}).unsqueeze(-1);  // [c, n, hq, 1]
  const torch::Tensor w_new = (l - both).exp_().permute({0, 2, 1}).unsqueeze(-1);
  out_rows.mul_(w_old).addcmul_(o, w_new);
  lse_rows.copy_(both);
}

}  // namespace

namespace levels {

namespace {

// Rows of the level whose rectangles are n x n: the queries of the odd blocks of n rows
// (their lower halves), the keys of the even ones; as [t / 2n, n, h, d] views of x [t, h, d].
torch::Tensor lower(const torch::Tensor& x, std::int64_t n) {
  return x.view({x.size(0) / (2 * n), 2, n, x.size(1), x.size(2)}).select(1, 1);
}
torch::Tensor upper(const torch::Tensor& x, std::int64_t n) {
  return x.view({x.size(0) / (2 * n), 2, n, x.size(1), x.size(2)}).select(1, 0);
}
// lse [hq, t] of the lower rows as [t / 2n, hq, n].
torch::Tensor lower_lse(const torch::Tensor& lse, std::int64_t n) {
  return lse.view({lse.size(0), lse.size(1) / (2 * n), 2, n}).select(2, 1).permute({1, 0, 2});
}

void check_block(std::int64_t t, std::int64_t block) {
  TORCH_CHECK(block > 0 && t % block == 0 && ((t / block) & (t / block - 1)) == 0 && t / block >= 2,
              "causal attention by levels: ", t, " rows are not 2^L >= 2 blocks of ", block);
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                std::int64_t block, const DiagonalForward& diag,
                                                const RectangleForward& rect) {
  const std::int64_t t = q.size(0), hq = q.size(1);
  check_block(t, block);
  const torch::ScalarType acc = accumulation(q);
  auto [out_d, lse_d] = diag(q, k, v);
  torch::Tensor out = out_d.to(acc);
  torch::Tensor lse = lse_d.reshape({hq, t}).to(acc).clone();
  for (std::int64_t n = t / 2; n >= block; n /= 2) {
    auto [o, l] = rect(lower(q, n), upper(k, n), upper(v, n));
    merge_part(lower(out, n), lower_lse(lse, n), o, l.to(acc));
  }
  return {out.to(q.scalar_type()), lse};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                 const torch::Tensor& k, const torch::Tensor& v,
                                                                 const torch::Tensor& out, const torch::Tensor& lse,
                                                                 std::int64_t block, const DiagonalBackward& diag,
                                                                 const RectangleBackward& rect) {
  const std::int64_t t = q.size(0), hq = q.size(1);
  check_block(t, block);
  const torch::ScalarType acc = accumulation(q);
  const torch::Tensor lse2 = lse.reshape({hq, t});
  const torch::Tensor o = out.contiguous(), dO = dout.contiguous();
  auto [dq_d, dk_d, dv_d] = diag(dO, q, k, v, o, lse2);
  torch::Tensor dq = dq_d.to(acc), dk = dk_d.to(acc), dv = dv_d.to(acc);
  for (std::int64_t n = t / 2; n >= block; n /= 2) {
    // The lower rows' log-sum-exp packed: cuDNN before 9.26 takes no other.
    auto [gq, gk, gv] =
        rect(lower(dO, n), lower(q, n), upper(k, n), upper(v, n), lower(o, n), lower_lse(lse2, n).contiguous());
    lower(dq, n).add_(gq);
    upper(dk, n).add_(gk);
    upper(dv, n).add_(gv);
  }
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

}  // namespace levels

namespace windowed {

namespace {

void check_cut(std::int64_t t, std::int64_t window, std::int64_t block) {
  TORCH_CHECK(block > 0 && t % block == 0 && window % block == 0 && window < t,
              "windowed attention by blocks: a row of ", t, " with a window of ", window, " is not cut by blocks of ",
              block);
}

// Rows [m * b, t) of x [t, h, d] as [t / b - m, b, h, d]; keys [0, t - m * b) likewise.
torch::Tensor query_blocks(const torch::Tensor& x, std::int64_t b, std::int64_t m) {
  const std::int64_t c = x.size(0) / b - m;
  return x.narrow(0, m * b, c * b).view({c, b, x.size(1), x.size(2)});
}
torch::Tensor key_blocks(const torch::Tensor& x, std::int64_t b, std::int64_t m) {
  const std::int64_t c = x.size(0) / b - m;
  return x.narrow(0, 0, c * b).view({c, b, x.size(1), x.size(2)});
}
// lse [hq, t] of rows [m * b, t) as [t / b - m, hq, b] (a view).
torch::Tensor query_lse(const torch::Tensor& lse, std::int64_t b, std::int64_t m) {
  const std::int64_t c = lse.size(1) / b - m;
  return lse.narrow(1, m * b, c * b).view({lse.size(0), c, b}).permute({1, 0, 2});
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                std::int64_t window, std::int64_t block,
                                                const levels::DiagonalForward& diag,
                                                const levels::RectangleForward& rect,
                                                const levels::RectangleForward& upper) {
  const std::int64_t t = q.size(0), hq = q.size(1);
  check_cut(t, window, block);
  const std::int64_t blocks_back = window / block;
  const torch::ScalarType acc = accumulation(q);
  auto [out_d, lse_d] = diag(q, k, v);
  torch::Tensor out = out_d.to(acc);
  torch::Tensor lse = lse_d.reshape({hq, t}).to(acc).clone();
  for (std::int64_t m = 1; m <= blocks_back; ++m) {
    const bool edge = m == blocks_back;
    auto [o, l] = (edge ? upper : rect)(query_blocks(q, block, m), key_blocks(k, block, m), key_blocks(v, block, m));
    // The edge's last query row sees none of its keys (0 / 0): its rows are merged without it.
    const std::int64_t rows = edge ? block - 1 : block;
    merge_part(query_blocks(out, block, m).narrow(1, 0, rows), query_lse(lse, block, m).narrow(2, 0, rows),
               o.narrow(1, 0, rows), l.narrow(2, 0, rows).to(acc));
  }
  return {out.to(q.scalar_type()), lse};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                 const torch::Tensor& k, const torch::Tensor& v,
                                                                 const torch::Tensor& out, const torch::Tensor& lse,
                                                                 std::int64_t window, std::int64_t block,
                                                                 const levels::DiagonalBackward& diag,
                                                                 const levels::RectangleBackward& rect,
                                                                 const levels::RectangleBackward& upper) {
  const std::int64_t t = q.size(0), hq = q.size(1);
  check_cut(t, window, block);
  const std::int64_t blocks_back = window / block;
  const torch::ScalarType acc = accumulation(q);
  const torch::Tensor lse2 = lse.reshape({hq, t});
  const torch::Tensor o = out.contiguous(), dO = dout.contiguous();
  auto [dq_d, dk_d, dv_d] = diag(dO, q, k, v, o, lse2);
  torch::Tensor dq = dq_d.to(acc), dk = dk_d.to(acc), dv = dv_d.to(acc);
  for (std::int64_t m = 1; m <= blocks_back; ++m) {
    // The rows' log-sum-exp packed, as for the levels' rectangles.
    auto [gq, gk, gv] = (m == blocks_back ? upper : rect)(
        query_blocks(dO, block, m), query_blocks(q, block, m), key_blocks(k, block, m), key_blocks(v, block, m),
        query_blocks(o, block, m), query_lse(lse2, block, m).contiguous());
    query_blocks(dq, block, m).add_(gq);
    key_blocks(dk, block, m).add_(gk);
    key_blocks(dv, block, m).add_(gv);
  }
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

}  // namespace windowed

#ifdef ODYSSEY_HAVE_CUDNN_FRONTEND

bool cudnn_softcap_compiled() { return true; }

namespace {

namespace fe = cudnn_frontend;

enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

void open_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    // LibTorch has loaded libcudnn already (its CUDA library needs it): this finds that copy.
    for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
      if ((fe::cudnn_dlhandle = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) != nullptr) break;
    }
  });
  if (fe::cudnn_dlhandle == nullptr) throw std::runtime_error("libcudnn.so.9 could not be opened");
}

void check(fe::error_t e, const char* what) {
  if (e.is_bad()) throw std::runtime_error(std::string("cuDNN ") + what + ": " + e.get_message());
}

cudnnHandle_t handle_for(int device) {
  open_library();
  // cuDNN handles are not to be shared between threads; autograd runs backward on its own.
  thread_local std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    cudnnHandle_t h = nullptr;
    if (fe::detail::create_handle(&h) != CUDNN_STATUS_SUCCESS) throw std::runtime_error("cudnnCreate failed");
    it = handles.emplace(device, h).first;
  }
  if (fe::detail::set_stream(it->second,
                             at::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream()) !=
      CUDNN_STATUS_SUCCESS)
    throw std::runtime_error("cudnnSetStream failed");
  return it->second;
}

// A 4-d view [b, s, h, d] as cuDNN's [b, h, s, d] dims and strides.
std::vector<std::int64_t> bhsd_dims(const torch::Tensor& x) { return {x.size(0), x.size(2), x.size(1), x.size(3)}; }
std::vector<std::int64_t> bhsd_strides(const torch::Tensor& x) {
  return {x.stride(0), x.stride(2), x.stride(1), x.stride(3)};
}

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
};

// Graphs by everything that shapes them (direction, dtype, dims and strides of every operand,
// scale, cap, device); a training run has a few per row length.
using Key = std::vector<std::int64_t>;
std::mutex g_plans_mutex;
std::map<Key, std::shared_ptr<Plan>> g_plans;

void append(Key& key, const std::vector<std::int64_t>& v) { key.insert(key.end(), v.begin(), v.end()); }

fe::DataType_t io_type(const torch::Tensor& x) {
  return x.scalar_type() == torch::kBFloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

std::shared_ptr<fe::graph::Graph> new_graph(const torch::Tensor& q) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(q))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid,
                                                    const torch::Tensor& x) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(bhsd_dims(x)).set_stride(bhsd_strides(x)));
}

void finish(Plan& p, cudnnHandle_t h) {
  check(p.graph->validate(), "validate");
  check(p.graph->build_operation_graph(h), "build_operation_graph");
  check(p.graph->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  check(p.graph->check_support(h), "check_support");
  check(p.graph->build_plans(h), "build_plans");
  check(p.graph->get_workspace_size(p.workspace), "get_workspace_size");
}

// The cache key of a graph: direction, dtype, device, every operand's dims and strides (cuDNN's
// [b, h, s, d] order), extra dims, scale and cap by their bits.
Key plan_key(std::int64_t direction, std::initializer_list<const torch::Tensor*> operands,
             const std::vector<std::int64_t>& extra, float scale, float cap) {
  const torch::Tensor& q = **operands.begin();
  Key key{direction, static_cast<std::int64_t>(q.scalar_type()), q.get_device()};
  for (const auto* x : operands) {
    append(key, bhsd_dims(*x));
    append(key, bhsd_strides(*x));
  }
  append(key, extra);
  key.push_back(static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(scale)));
  key.push_back(static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(cap)));
  return key;
}

// The soft-cap as a score modifier (forward, or its backward), the cap a pass-by-value scalar.
// `upper`: then every score on or below the diagonal is masked (query r keeps keys r+1.. of the
// rectangle: a windowed row's edge, windowed:: in the header), by the frontend's own band mask
// inside the modifier, since cuDNN takes no mask of its own beside a modifier. The backward needs
// no mask term: masked scores have P = 0, so their dS is 0 before the soft-cap's backward.
using ScoreModifier = std::function<std::shared_ptr<fe::graph::Tensor_attributes>(
    std::shared_ptr<fe::graph::Graph>, std::shared_ptr<fe::graph::Tensor_attributes>)>;
ScoreModifier softcap_modifier(std::shared_ptr<fe::graph::attn::score_modifiers::Softcap> mod, float cap, bool backward,
                               bool upper) {
  return [mod, cap, backward, upper](std::shared_ptr<fe::graph::Graph> sub,
                                     std::shared_ptr<fe::graph::Tensor_attributes> s) {
    auto c = sub->tensor(fe::graph::Tensor_attributes(cap));
    if (backward) return mod->backward(sub, s, c);
    auto x = mod->forward(sub, s, c);
    if (!upper) return x;
    // Kept where column + 0 > row.
    return fe::graph::attn::score_modifiers::sliding_window_mask(sub, x, fe::DiagonalAlignment_t::TOP_LEFT,
                                                                 std::optional<std::int64_t>(0), std::nullopt, 0, 0,
                                                                 nullptr, nullptr);
  };
}

// out [b, sq, hq, d] and stats [b, hq, sq] written contiguous.
std::shared_ptr<Plan> forward_plan(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, float scale,
                                   float cap, bool upper, cudnnHandle_t h) {
  const Key key = plan_key(0, {&q, &k, &v}, {upper ? 1 : 0}, scale, cap);
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  if (auto it = g_plans.find(key); it != g_plans.end()) return it->second;
  auto p = std::make_shared<Plan>();
  p->graph = new_graph(q);
  auto& g = *p->graph;
  const std::int64_t b = q.size(0), sq = q.size(1), hq = q.size(2), d = q.size(3);
  auto Q = input(g, "Q", kQ, q), K = input(g, "K", kK, k), V = input(g, "V", kV, v);
  auto opts = fe::graph::SDPA_attributes().set_name("softcap_rect").set_generate_stats(true).set_attn_scale(scale);
  if (cap > 0.f) {
    auto mod = std::make_shared<fe::graph::attn::score_modifiers::Softcap>();
    opts.set_score_mod(softcap_modifier(mod, cap, false, upper));
  }
  auto [O, Stats] = g.sdpa(Q, K, V, std::move(opts));
  O->set_output(true).set_uid(kO).set_dim({b, hq, sq, d}).set_stride({sq * hq * d, d, hq * d, 1});
  Stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({b, hq, sq, 1})
      .set_stride({hq * sq, sq, 1, 1});
  finish(*p, h);
  g_plans.emplace(key, p);
  return p;
}

// dq [b, sq, hq, d], dk and dv [b, skv, hkv, d] written contiguous; stats [b, hq, sq] any strides.
std::shared_ptr<Plan> backward_plan(const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& out, const torch::Tensor& stats,
                                    float scale, float cap, bool upper, cudnnHandle_t h) {
  Key extra = stats.sizes().vec();
  extra.push_back(upper ? 1 : 0);
  append(extra, stats.strides().vec());
  const Key key = plan_key(1, {&q, &dout, &k, &v, &out}, extra, scale, cap);
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  if (auto it = g_plans.find(key); it != g_plans.end()) return it->second;
  auto p = std::make_shared<Plan>();
  p->graph = new_graph(q);
  auto& g = *p->graph;
  const std::int64_t b = q.size(0), sq = q.size(1), hq = q.size(2), d = q.size(3);
  const std::int64_t skv = k.size(1), hkv = k.size(2);
  auto Q = input(g, "Q", kQ, q), K = input(g, "K", kK, k), V = input(g, "V", kV, v);
  auto O = input(g, "O", kO, out), dO = input(g, "dO", kDO, dout);
  auto Stats = g.tensor(fe::graph::Tensor_attributes()
                            .set_name("Stats")
                            .set_uid(kStats)
                            .set_data_type(fe::DataType_t::FLOAT)
                            .set_dim({b, hq, sq, 1})
                            .set_stride({stats.stride(0), stats.stride(1), stats.stride(2), 1}));
  auto opts = fe::graph::SDPA_backward_attributes().set_name("softcap_rect_bwd").set_attn_scale(scale);
  if (cap > 0.f) {
    auto mod = std::make_shared<fe::graph::attn::score_modifiers::Softcap>();
    opts.set_score_mod(softcap_modifier(mod, cap, false, upper));
    opts.set_score_mod_bprop(softcap_modifier(mod, cap, true, false));
  }
  auto [dQ, dK, dV] = g.sdpa_backward(Q, K, V, O, dO, Stats, std::move(opts));
  dQ->set_output(true).set_uid(kDQ).set_dim({b, hq, sq, d}).set_stride({sq * hq * d, d, hq * d, 1});
  dK->set_output(true).set_uid(kDK).set_dim({b, hkv, skv, d}).set_stride({skv * hkv * d, d, hkv * d, 1});
  dV->set_output(true).set_uid(kDV).set_dim({b, hkv, skv, d}).set_stride({skv * hkv * d, d, hkv * d, 1});
  finish(*p, h);
  g_plans.emplace(key, p);
  return p;
}

void run(const Plan& p, std::unordered_map<std::int64_t, void*>& pack, cudnnHandle_t h, const torch::Tensor& like) {
  torch::Tensor ws;
  if (p.workspace > 0) ws = torch::empty({p.workspace}, like.options().dtype(torch::kUInt8));
  check(p.graph->execute(h, pack, ws.defined() ? ws.data_ptr() : nullptr), "execute");
}

// Full attention of q [b, sq, hq, d] on k, v [b, skv, hkv, d] (`upper`: query r on keys r+1..
// only; the last row's out and lse are then undefined): {out [b, sq, hq, d], lse [b, hq, sq]}.
std::pair<torch::Tensor, torch::Tensor> rect_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                     const torch::Tensor& v, float scale, float cap,
                                                     bool upper = false) {
  const int device = q.get_device();
  cudnnHandle_t h = handle_for(device);
  const auto p = forward_plan(q, k, v, scale, cap, upper, h);
  torch::Tensor out = torch::empty({q.size(0), q.size(1), q.size(2), q.size(3)}, q.options());
  torch::Tensor lse = torch::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(torch::kFloat32));
  std::unordered_map<std::int64_t, void*> pack{
      {kQ, q.data_ptr()}, {kK, k.data_ptr()}, {kV, v.data_ptr()}, {kO, out.data_ptr()}, {kStats, lse.data_ptr()}};
  run(*p, pack, h, q);
  return {out, lse};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> rect_backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                      const torch::Tensor& k, const torch::Tensor& v,
                                                                      const torch::Tensor& out,
                                                                      const torch::Tensor& lse, float scale, float cap,
                                                                      bool upper = false) {
  const int device = q.get_device();
  cudnnHandle_t h = handle_for(device);
  const auto p = backward_plan(dout, q, k, v, out, lse, scale, cap, upper, h);
  torch::Tensor dq = torch::empty(q.sizes(), q.options());
  torch::Tensor dk = torch::empty(k.sizes(), k.options());
  torch::Tensor dv = torch::empty(v.sizes(), v.options());
  std::unordered_map<std::int64_t, void*> pack{{kQ, q.data_ptr()},   {kK, k.data_ptr()},     {kV, v.data_ptr()},
                                               {kO, out.data_ptr()}, {kDO, dout.data_ptr()}, {kStats, lse.data_ptr()},
                                               {kDQ, dq.data_ptr()}, {kDK, dk.data_ptr()},   {kDV, dv.data_ptr()}};
  run(*p, pack, h, q);
  return {dq, dk, dv};
}

// The parts both cuts are made of: the band kernels on the diagonal blocks (query i from key
// first_key[i]), cuDNN's full rectangles, and (`edge`) its rectangles under the window edge's mask.
levels::DiagonalForward band_forward(const torch::Tensor& first_key, double scale, double softcap) {
  return [&first_key, scale, softcap](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return band_attention_forward(q, k, v, first_key, scale, softcap);
  };
}
levels::DiagonalBackward band_backward(const torch::Tensor& first_key, double scale, double softcap) {
  return [&first_key, scale, softcap](const torch::Tensor& g, const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& o, const torch::Tensor& l) {
    return band_attention_backward(g, q, k, v, o, l, first_key, scale, softcap);
  };
}
levels::RectangleForward cudnn_forward(double scale, double softcap, bool edge = false) {
  return [scale = static_cast<float>(scale), cap = static_cast<float>(softcap), edge](
             const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return rect_forward(q, k, v, scale, cap, edge);
  };
}
levels::RectangleBackward cudnn_backward(double scale, double softcap, bool edge = false) {
  return
      [scale = static_cast<float>(scale), cap = static_cast<float>(softcap), edge](
          const torch::Tensor& g, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
          const torch::Tensor& o, const torch::Tensor& l) { return rect_backward(g, q, k, v, o, l, scale, cap, edge); };
}

// Runs one cut; an exception (cuDNN refusing a graph) turns its path off and gives nullopt.
template <typename Cut>
auto guarded(Failure& f, Cut&& cut) -> std::optional<decltype(cut())> {
  try {
    return cut();
  } catch (const std::exception& e) {
    remember_failure(f, e.what());
    return std::nullopt;
  }
}

}  // namespace

bool softcap_causal_takes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (!g_on.load() || g_causal.failed.load() || !band_kernels_take(q, k, v)) return false;
  return q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1;
}

std::optional<std::pair<torch::Tensor, torch::Tensor>> softcap_causal_forward(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& block_first_key,
    std::int64_t block, double scale, double softcap) {
  return guarded(g_causal, [&] {
    return levels::forward(q, k, v, block, band_forward(block_first_key, scale, softcap),
                           cudnn_forward(scale, softcap));
  });
}

std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> softcap_causal_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& block_first_key, std::int64_t block,
    double scale, double softcap) {
  return guarded(g_causal, [&] {
    return levels::backward(dout, q, k, v, out, lse, block, band_backward(block_first_key, scale, softcap),
                            cudnn_backward(scale, softcap));
  });
}

bool softcap_window_takes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return g_windowed_on.load() && !g_window.failed.load() && softcap_causal_takes(q, k, v);
}

std::optional<std::pair<torch::Tensor, torch::Tensor>> softcap_window_forward(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& block_first_key,
    std::int64_t block, std::int64_t window, double scale, double softcap) {
  // The edge's mask rides in the soft-cap's score modifier: a row without a cap has none to carry it.
  TORCH_CHECK(softcap > 0, "softcap_window_forward: a windowed row needs a soft-cap, got ", softcap);
  return guarded(g_window, [&] {
    return windowed::forward(q, k, v, window, block, band_forward(block_first_key, scale, softcap),
                             cudnn_forward(scale, softcap), cudnn_forward(scale, softcap, true));
  });
}

std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> softcap_window_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& block_first_key, std::int64_t block,
    std::int64_t window, double scale, double softcap) {
  TORCH_CHECK(softcap > 0, "softcap_window_backward: a windowed row needs a soft-cap, got ", softcap);
  return guarded(g_window, [&] {
    return windowed::backward(dout, q, k, v, out, lse, window, block, band_backward(block_first_key, scale, softcap),
                              cudnn_backward(scale, softcap), cudnn_backward(scale, softcap, true));
  });
}

namespace {

struct SoftcapCausalFn : public torch::autograd::Function<SoftcapCausalFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, double softcap, std::int64_t window) {
    const std::int64_t t = q.size(0);
    const std::int64_t block = window > 0 ? softcap_window_block(t, window) : softcap_diagonal_block(t);
    TORCH_CHECK(block > 0, "softcap_causal_attention: no block cuts ", t, " rows with a window of ", window);
    std::vector<std::int64_t> first(static_cast<std::size_t>(t));
    for (std::int64_t i = 0; i < t; ++i) first[static_cast<std::size_t>(i)] = i / block * block;
    const torch::Tensor fk = torch::tensor(first, torch::kInt64).to(q.device());
    auto r = window > 0 ? softcap_window_forward(q, k, v, fk, block, window, scale, softcap)
                        : softcap_causal_forward(q, k, v, fk, block, scale, softcap);
    if (!r)
      throw std::runtime_error("cuDNN soft-capped attention: " +
                               (window > 0 ? cudnn_softcap_window_failure() : cudnn_softcap_failure()));
    ctx->save_for_backward({q, k, v, r->first, r->second, fk});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["block"] = block;
    ctx->saved_data["window"] = window;
    return r->first;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const std::int64_t block = ctx->saved_data["block"].toInt(), window = ctx->saved_data["window"].toInt();
    const double scale = ctx->saved_data["scale"].toDouble(), softcap = ctx->saved_data["softcap"].toDouble();
    auto r = window > 0
                 ? softcap_window_backward(grads[0], s[0], s[1], s[2], s[3], s[4], s[5], block, window, scale, softcap)
                 : softcap_causal_backward(grads[0], s[0], s[1], s[2], s[3], s[4], s[5], block, scale, softcap);
    if (!r)
      throw std::runtime_error("cuDNN soft-capped attention backward: " +
                               (window > 0 ? cudnn_softcap_window_failure() : cudnn_softcap_failure()));
    auto [dq, dk, dv] = std::move(*r);
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor softcap_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       double scale, double softcap, std::int64_t window) {
  return SoftcapCausalFn::apply(q, k, v, scale, softcap, window);
}

#else  // no cuDNN graph API in this build

torch::Tensor softcap_causal_attention(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double, double,
                                       std::int64_t) {
  throw std::runtime_error("softcap_causal_attention: this build has no cuDNN graph API");
}

bool cudnn_softcap_compiled() { return false; }
bool softcap_causal_takes(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) { return false; }
bool softcap_window_takes(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) { return false; }

std::optional<std::pair<torch::Tensor, torch::Tensor>> softcap_window_forward(const torch::Tensor&,
                                                                              const torch::Tensor&,
                                                                              const torch::Tensor&,
                                                                              const torch::Tensor&, std::int64_t,
                                                                              std::int64_t, double, double) {
  return std::nullopt;
}

std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> softcap_window_backward(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
    const torch::Tensor&, const torch::Tensor&, std::int64_t, std::int64_t, double, double) {
  return std::nullopt;
}

std::optional<std::pair<torch::Tensor, torch::Tensor>> softcap_causal_forward(const torch::Tensor&,
                                                                              const torch::Tensor&,
                                                                              const torch::Tensor&,
                                                                              const torch::Tensor&, std::int64_t,
                                                                              double, double) {
  return std::nullopt;
}

std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> softcap_causal_backward(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
    const torch::Tensor&, const torch::Tensor&, std::int64_t, double, double) {
  return std::nullopt;
}

#endif

}  // namespace odyssey::kernels
