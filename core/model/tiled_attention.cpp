#include "model/tiled_attention.h"

#include "kernels/attention_tile.h"
#include "kernels/band_attention.h"
#include "kernels/cudnn_attention.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace odyssey::model {

namespace {

std::atomic<bool> g_band_backward_everywhere{false};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dtype scores, log-sum-exp and gradient sums are kept in: float64 for float64 inputs
// (the tests' exactness runs), else fp32.
torch::ScalarType accumulation_type(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat32;
}

// a @ b (batched) accumulated and returned in `acc`: 16-bit CUDA inputs go through cuBLAS with
// an fp32 result (no rounding of the product to 16 bits); other inputs are converted first.
torch::Tensor bmm_acc(const torch::Tensor& a, const torch::Tensor& b, torch::ScalarType acc) {
  const bool half = a.scalar_type() == torch::kBFloat16 || a.scalar_type() == torch::kHalf;
  if (a.is_cuda() && half && acc == torch::kFloat32 && a.scalar_type() == b.scalar_type()) return at::bmm(a, b, acc);
  return at::bmm(a.to(acc), b.to(acc));
}

// Tiles of query rows and the first key each tile's rows can reach.
struct Tiles {
  std::vector<std::int64_t> row0;  // the tile's first row; the next tile's (or T) ends it
  std::vector<std::int64_t> key0;  // the first key any of its rows sees
  torch::Tensor first_key;         // [T] int64: the first key each query sees
  std::int64_t window = 0;         // the layer's window (0: none); picks the backward's kernels
  // One sample on CUDA in a build with cuDNN's graph API: the block of kernels/cudnn_attention.h
  // (the diagonal's for a causal row, the windowed cut's for a window shorter than the row; 0:
  // not that path) and its first keys.
  std::int64_t block = 0;
  torch::Tensor block_first_key;
};

// cu: the boundaries on the host, int64, contiguous.
Tiles plan_tiles_host(const torch::Tensor& cu, std::int64_t total, std::int64_t window, std::int64_t heads,
                      std::int64_t tile_rows, const torch::Device& device) {
  const std::int64_t n = cu.numel() - 1;
  const std::int64_t* c = cu.data_ptr<std::int64_t>();
  TORCH_CHECK(n >= 1 && c[0] == 0 && c[n] == total, "tiled attention: cu_seqlens must run from 0 to the row length ",
              total);
  std::vector<std::int64_t> first(static_cast<std::size_t>(total));
  std::int64_t longest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(c[i + 1] >= c[i], "tiled attention: cu_seqlens must not decrease");
    longest = std::max(longest, c[i + 1] - c[i]);
    for (std::int64_t r = c[i]; r < c[i + 1]; ++r) first[r] = window > 0 ? std::max(c[i], r - window + 1) : c[i];
  }
  const std::int64_t reach = window > 0 ? std::min(window, longest) : longest;
  const std::int64_t rows = tile_rows > 0 ? tile_rows : tiled_attention_rows(total, reach, heads);
  Tiles t;
  t.window = window;
  for (std::int64_t a = 0; a < total; a += rows) {
    t.row0.push_back(a);
    t.key0.push_back(first[a]);  // first[] never decreases along the row
  }
  t.first_key = torch::tensor(first, torch::kInt64).to(device);
  if (n == 1 && device.is_cuda() && kernels::cudnn_softcap_compiled()) {
    t.block = window > 0 && window < total ? kernels::softcap_window_block(total, window)
                                           : kernels::softcap_diagonal_block(total);
    if (t.block > 0) {
      for (std::int64_t r = 0; r < total; ++r) first[r] = r / t.block * t.block;
      t.block_first_key = torch::tensor(first, torch::kInt64).to(device);
    }
  }
  return t;
}

torch::Tensor host_boundaries(const torch::Tensor& cu_seqlens) {
  return cu_seqlens.to(torch::kCPU, torch::kInt64).contiguous();
}

}  // namespace

class TilePlans {
 public:
  explicit TilePlans(torch::Tensor cu) : cu_(std::move(cu)) {}
  Tiles get(std::int64_t total, std::int64_t window, std::int64_t heads, std::int64_t tile_rows,
            const torch::Device& device) {
    const auto key = std::make_tuple(total, window, heads, tile_rows, device.str());
    std::lock_guard<std::mutex> lock(mutex_);
    if (!host_.defined()) host_ = host_boundaries(cu_);  // the first plan of the row reads them
    auto it = plans_.find(key);
    if (it == plans_.end())
      it = plans_.emplace(key, plan_tiles_host(host_, total, window, heads, tile_rows, device)).first;
    return it->second;
  }

 private:
  torch::Tensor cu_;    // the row's boundaries as given
  torch::Tensor host_;  // the same on the host, int64, once a plan needed them
  std::mutex mutex_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string>, Tiles> plans_;
};

std::shared_ptr<TilePlans> make_tile_plans(const torch::Tensor& cu_seqlens) {
  return std::make_shared<TilePlans>(cu_seqlens);
}

namespace {

Tiles plan_tiles(const torch::Tensor& cu_seqlens, std::int64_t total, std::int64_t window, std::int64_t heads,
                 std::int64_t tile_rows, const torch::Device& device, TilePlans* plans) {
  if (plans) return plans->get(total, window, heads, tile_rows, device);
  return plan_tiles_host(host_boundaries(cu_seqlens), total, window, heads, tile_rows, device);
}

// Rows a..a+n of x [T, Hkv * g, D] as [Hkv, g * n, D] (a copy): a KV head's query heads are
// consecutive rows, so one batched GEMM per KV head covers all of them.
torch::Tensor query_tile(const torch::Tensor& x, std::int64_t hkv, std::int64_t a, std::int64_t n) {
  const std::int64_t g = x.size(1) / hkv, d = x.size(2);
  return x.narrow(0, a, n).reshape({n, hkv, g, d}).permute({1, 2, 0, 3}).reshape({hkv, g * n, d});
}

// Keys or values lo..lo+m of x [T, Hkv, D] as [Hkv, m, D] (a strided view).
torch::Tensor key_tile(const torch::Tensor& x, std::int64_t lo, std::int64_t m) {
  return x.narrow(0, lo, m).permute({1, 0, 2});
}

// The tiles' forward: out [T, Hq, D] in q's dtype, lse [Hkv, g, T] in the accumulation dtype.
std::pair<torch::Tensor, torch::Tensor> forward_tiles(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v, const Tiles& tiles, double scale,
                                                      double softcap) {
  const std::int64_t t = q.size(0), hq = q.size(1), hkv = k.size(1), g = hq / hkv, d = q.size(2);
  const bool windowed = tiles.window > 0 && tiles.window < t;
  if (tiles.block > 0 && softcap > 0 && windowed && kernels::softcap_window_takes(q, k, v)) {  // cuDNN's blocks
    if (auto r =
            kernels::softcap_window_forward(q, k, v, tiles.block_first_key, tiles.block, tiles.window, scale, softcap))
      return {r->first, r->second.view({hkv, g, t})};
  }
  if (tiles.block > 0 && softcap > 0 && !windowed && kernels::softcap_causal_takes(q, k, v)) {  // cuDNN's rectangles
    if (auto r = kernels::softcap_causal_forward(q, k, v, tiles.block_first_key, tiles.block, scale, softcap))
      return {r->first, r->second.view({hkv, g, t})};
  }
  if (kernels::band_attention_supported(q, k, v)) {  // the fused kernels: no tiles of scores at all
    auto [out, lse] = kernels::band_attention_forward(q, k, v, tiles.first_key, scale, softcap);
    return {out, lse.view({hkv, g, t})};
  }
  const torch::ScalarType acc = accumulation_type(q);
  torch::Tensor out = torch::empty({t, hq, d}, q.options());
  torch::Tensor lse = torch::empty({hkv, g, t}, q.options().dtype(acc));
  const torch::Tensor out4 = out.view({t, hkv, g, d});
  for (std::size_t i = 0; i < tiles.row0.size(); ++i) {
    const std::int64_t a = tiles.row0[i], n = (i + 1 < tiles.row0.size() ? tiles.row0[i + 1] : t) - a;
    const std::int64_t lo = tiles.key0[i], m = a + n - lo;
    const kernels::AttentionTile tile{tiles.first_key, a, n, lo, scale, softcap};
    const torch::Tensor s = bmm_acc(query_tile(q, hkv, a, n), key_tile(k, lo, m).transpose(1, 2), acc);
    const auto [p, tile_lse] = kernels::tile_softmax(s.view({-1, m}), tile, v.scalar_type());
    const torch::Tensor o = at::bmm(p.view({hkv, g * n, m}), key_tile(v, lo, m));
    out4.narrow(0, a, n).copy_(o.view({hkv, g, n, d}).permute({2, 0, 1, 3}));
    lse.narrow(2, a, n).copy_(tile_lse.view({hkv, g, n}));
  }
  return {out, lse};
}

// The tiles' backward from the output and log-sum-exp: {dq, dk, dv} in the inputs' dtypes.
variable_list backward_tiles(const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, const torch::Tensor& out, const torch::Tensor& lse,
                             const Tiles& tiles, double scale, double softcap) {
  const std::int64_t t = q.size(0), hq = q.size(1), hkv = k.size(1), g = hq / hkv, d = q.size(2);
  const bool windowed = tiles.window > 0 && tiles.window < t;
  if (tiles.block > 0 && softcap > 0 && windowed && kernels::softcap_window_takes(q, k, v)) {
    if (auto r = kernels::softcap_window_backward(dout, q, k, v, out, lse, tiles.block_first_key, tiles.block,
                                                  tiles.window, scale, softcap)) {
      auto [dq, dk, dv] = std::move(*r);
      return {dq, dk, dv};
    }
  }
  if (tiles.block > 0 && softcap > 0 && !windowed && kernels::softcap_causal_takes(q, k, v)) {
    if (auto r = kernels::softcap_causal_backward(dout, q, k, v, out, lse, tiles.block_first_key, tiles.block, scale,
                                                  softcap)) {
      auto [dq, dk, dv] = std::move(*r);
      return {dq, dk, dv};
    }
  }
  // The band kernels' backward is faster than the GEMM tiles' only where a window bounds the
  // band (on an H100, Gemma-2's heads at 32K with a 4096 window: 76 against 122 ms forward and
  // backward; without a window, 16K: 82 against 56 ms; Gemma-2-9B LoRA at 16K 3,462 tokens/s with
  // the kernels' backward everywhere against 3,848 with it on windowed layers only;
  // docs/benchmarks.md, 2026-12-06 night): global layers keep the tiles' backward from the band
  // kernels' forward (the same out and lse), unless set_band_backward_everywhere.
  if (kernels::band_attention_supported(q, k, v) && (tiles.window > 0 || band_backward_everywhere())) {
    auto [dq, dk, dv] = kernels::band_attention_backward(dout, q, k, v, out, lse, tiles.first_key, scale, softcap);
    return {dq, dk, dv};
  }
  const torch::ScalarType acc = accumulation_type(q);
  torch::Tensor dq = torch::empty({t, hq, d}, q.options());
  torch::Tensor dk = torch::zeros({hkv, t, d}, q.options().dtype(acc));
  torch::Tensor dv = torch::zeros({hkv, t, d}, q.options().dtype(acc));
  const torch::Tensor dq4 = dq.view({t, hkv, g, d});
  for (std::size_t i = 0; i < tiles.row0.size(); ++i) {
    const std::int64_t a = tiles.row0[i], n = (i + 1 < tiles.row0.size() ? tiles.row0[i + 1] : t) - a;
    const std::int64_t lo = tiles.key0[i], m = a + n - lo;
    const torch::Tensor qt = query_tile(q, hkv, a, n), kt = key_tile(k, lo, m), vt = key_tile(v, lo, m);
    const torch::Tensor dot = query_tile(dout, hkv, a, n).to(q.scalar_type());
    // D_i = sum_d dO * O: the softmax backward's row term.
    const torch::Tensor delta = (dot.to(acc) * query_tile(out, hkv, a, n).to(acc)).sum(-1).view({-1});
    const kernels::AttentionTile tile{tiles.first_key, a, n, lo, scale, softcap};
    const torch::Tensor s = bmm_acc(qt, kt.transpose(1, 2), acc);
    const torch::Tensor dp = bmm_acc(dot, vt.transpose(1, 2), acc);
    const auto [p, ds] = kernels::tile_softmax_backward(
        s.view({-1, m}), dp.view({-1, m}), lse.narrow(2, a, n).reshape({-1}), delta, tile, q.scalar_type());
    const torch::Tensor p3 = p.view({hkv, g * n, m}), ds3 = ds.view({hkv, g * n, m});
    dv.narrow(1, lo, m).add_(bmm_acc(p3.transpose(1, 2), dot, acc));
    dq4.narrow(0, a, n).copy_(bmm_acc(ds3, kt, acc).view({hkv, g, n, d}).permute({2, 0, 1, 3}));
    dk.narrow(1, lo, m).add_(bmm_acc(ds3.transpose(1, 2), qt, acc));
  }
  return {dq, dk.permute({1, 0, 2}).to(k.scalar_type()).contiguous(),
          dv.permute({1, 0, 2}).to(v.scalar_type()).contiguous()};
}

void save_tiles(AutogradContext* ctx, const Tiles& tiles, double scale, double softcap) {
  ctx->saved_data["window"] = tiles.window;
  ctx->saved_data["block"] = tiles.block;
  ctx->saved_data["row0"] = tiles.row0;
  ctx->saved_data["key0"] = tiles.key0;
  ctx->saved_data["scale"] = scale;
  ctx->saved_data["softcap"] = softcap;
}

// The backward of both autograd nodes: saved q, k, v, first_key, out, lse.
variable_list backward_saved(AutogradContext* ctx, const variable_list& grads, std::size_t undefined) {
  const auto saved = ctx->get_saved_variables();
  Tiles tiles;
  tiles.row0 = ctx->saved_data.at("row0").toIntVector();
  tiles.key0 = ctx->saved_data.at("key0").toIntVector();
  tiles.first_key = saved[3];
  tiles.window = ctx->saved_data.at("window").toInt();
  tiles.block = ctx->saved_data.at("block").toInt();
  tiles.block_first_key = saved[6];
  variable_list g = backward_tiles(grads[0], saved[0], saved[1], saved[2], saved[4], saved[5], tiles,
                                   ctx->saved_data.at("scale").toDouble(), ctx->saved_data.at("softcap").toDouble());
  g.resize(g.size() + undefined);
  return g;
}

struct TiledAttentionFn : public torch::autograd::Function<TiledAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& first_key, std::vector<std::int64_t> row0,
                               std::vector<std::int64_t> key0, std::int64_t window, double scale, double softcap,
                               const torch::Tensor& block_first_key, std::int64_t block) {
    const Tiles tiles{std::move(row0), std::move(key0), first_key, window, block, block_first_key};
    auto [out, lse] = forward_tiles(q, k, v, tiles, scale, softcap);
    ctx->save_for_backward({q, k, v, first_key, out, lse, block_first_key});
    save_tiles(ctx, tiles, scale, softcap);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return backward_saved(ctx, grads, 8); }
};

// A kept layer's recomputation: the output its forward kept, and the tiles' backward from it.
struct KeptTiledAttentionFn : public torch::autograd::Function<KeptTiledAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& first_key, std::vector<std::int64_t> row0,
                               std::vector<std::int64_t> key0, std::int64_t window, double scale, double softcap,
                               const torch::Tensor& block_first_key, std::int64_t block, std::int64_t stash_ptr) {
    auto* st = reinterpret_cast<AttentionStash*>(stash_ptr);
    const torch::Tensor out = std::move(st->out), lse = std::move(st->lse);
    ctx->save_for_backward({q, k, v, first_key, out, lse, block_first_key});
    save_tiles(ctx, Tiles{std::move(row0), std::move(key0), first_key, window, block, block_first_key}, scale, softcap);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return backward_saved(ctx, grads, 9); }
};

// The diagonal's first keys as an autograd input: a defined tensor always (autograd takes no
// undefined inputs); the row's own first keys stand in, unread, when the cuDNN path is not planned.
torch::Tensor block_key(const Tiles& tiles) { return tiles.block > 0 ? tiles.block_first_key : tiles.first_key; }

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "tiled attention: q, k, v must be [T, H, D]");
  TORCH_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(2) == k.size(2), "tiled attention: q ",
              q.sizes(), ", k ", k.sizes(), " and v ", v.sizes(), " do not fit");
  TORCH_CHECK(q.size(1) % k.size(1) == 0, "tiled attention: ", q.size(1), " query heads for ", k.size(1), " KV heads");
}

}  // namespace

torch::Tensor tiled_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& cu_seqlens, double scale, std::int64_t window, double softcap,
                                     std::int64_t tile_rows, TilePlans* plans) {
  check_shapes(q, k, v);
  const Tiles tiles = plan_tiles(cu_seqlens, q.size(0), window, q.size(1), tile_rows, q.device(), plans);
  return TiledAttentionFn::apply(q, k, v, tiles.first_key, tiles.row0, tiles.key0, tiles.window, scale, softcap,
                                 block_key(tiles), tiles.block);
}

torch::Tensor kept_tiled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& cu_seqlens, double scale, std::int64_t window, double softcap,
                                   AttentionStash& stash, TilePlans* plans) {
  check_shapes(q, k, v);
  const Tiles tiles = plan_tiles(cu_seqlens, q.size(0), window, q.size(1), 0, q.device(), plans);
  if (!stash.recomputing()) {
    auto [out, lse] = forward_tiles(q, k, v, tiles, scale, softcap);
    stash.out = out;
    stash.lse = lse;
    return out;
  }
  return KeptTiledAttentionFn::apply(q, k, v, tiles.first_key, tiles.row0, tiles.key0, tiles.window, scale, softcap,
                                     block_key(tiles), tiles.block,
                                     static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&stash)));
}

void set_band_backward_everywhere(bool on) { g_band_backward_everywhere = on; }
bool band_backward_everywhere() { return g_band_backward_everywhere.load(); }

}  // namespace odyssey::model
