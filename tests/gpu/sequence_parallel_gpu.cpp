// Sequence-parallel attention on GPUs over NCCL, against one GPU (no Qt: the GPU machines
// have none). Run under torchrun, two or more ranks, one GPU each:
//
//   build-gpu/tests/gpu/sequence_parallel_gpu      (launches itself on GPUs 0 and 1)
//   torchrun --no-python --nproc-per-node 2 build-gpu/tests/gpu/sequence_parallel_gpu
//
// Every rank builds the same bf16 row (Qwen2.5-7B-like heads: 28 query heads, 4 KV heads,
// head dim 128), shards it with the engine's shard_row and runs the engine's sequence-
// parallel attention (the paths the trainer takes on GPUs: ring attention on cuDNN blocks for
// one sample and varlen flash blocks otherwise, with overlapped K/V rotation; Ulysses with
// cuDNN SDPA for one sample, varlen flash for packed samples). The oracle is the same attention in fp32 over the whole
// row on one GPU (SDPA with a block-diagonal causal mask); one GPU's own bf16 varlen flash attention, also over the
// whole row, gives the bf16 rounding floor. The tolerance is docs/model.md's:
//   rel(sp_bf16, fp32) <= 2 * rel(one_gpu_bf16, fp32) + 2^-8
// for the output and the gradients of Q, K and V, with rel(a, b) = max|a - b| / max|b| over
// real tokens; padding gets exactly zero gradient. One JSON line per case and rank; exit 0
// when every case passes, 1 otherwise, 77 without two GPUs. Rank 0's lines are printed.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "dist/comm.h"
#include "dist/launcher.h"
#include "dist/mesh.h"
#include "dist/sequence_parallel.h"
#include "model/attention.h"
#include "run/run_lock.h"
#include "train/batch.h"

using namespace odyssey;

namespace {

struct Case {
  const char* name;
  int ulysses, ring;
  std::vector<std::int64_t> lengths;
  model::AttentionBackend prefer = model::AttentionBackend::CuDNN;  // attn_impl auto
};

double rel(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat32) - want).abs().max().item<double>() / std::max(1e-30, want.abs().max().item<double>());
}

struct Grads {
  torch::Tensor out, dq, dk, dv;
};

// Attention over the whole row on this GPU, in the dtype of q.
Grads whole_row(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& w,
                const train::PackedRow& row, double scale) {
  torch::Tensor qr = q.clone().requires_grad_(true), kr = k.clone().requires_grad_(true),
                vr = v.clone().requires_grad_(true);
  const torch::Tensor out = model::varlen_causal_attention(qr, kr, vr, row.cu_seqlens, row.max_seqlen, scale, nullptr);
  (out.to(torch::kFloat32) * w).sum().backward();
  return {out.detach().to(torch::kFloat32), qr.grad().to(torch::kFloat32), kr.grad().to(torch::kFloat32),
          vr.grad().to(torch::kFloat32)};
}

bool run_case(const Case& c, const dist::Mesh& mesh, const torch::Device& device, int rank) {
  const std::int64_t hq = 28, hkv = 4, d = 128;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<std::int32_t> ids, pos;
  std::int64_t t = 0;
  for (std::int64_t n : c.lengths)
    for (std::int64_t i = 0; i < n; ++i) {
      ids.push_back(static_cast<std::int32_t>(t++));
      pos.push_back(static_cast<std::int32_t>(i));
    }
  const train::PackedRow row_dev =
      train::make_packed_row(ids, std::vector<std::int32_t>(ids.size(), 0), pos).to(device);  // as the trainer has it

  torch::manual_seed(11);  // the same tensors on every rank
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  const torch::Tensor q = torch::randn({t, hq, d}, f32), k = torch::randn({t, hkv, d}, f32),
                      v = torch::randn({t, hkv, d}, f32), w = torch::randn({t, hq, d}, f32);
  const torch::Tensor qb = q.to(torch::kBFloat16), kb = k.to(torch::kBFloat16), vb = v.to(torch::kBFloat16);
  // The oracle sees the bf16-rounded inputs in fp32, so only the attention's rounding differs.
  const Grads ref =
      whole_row(qb.to(torch::kFloat32), kb.to(torch::kFloat32), vb.to(torch::kFloat32), w, row_dev, scale);
  const Grads one = whole_row(qb, kb, vb, w, row_dev, scale);

  const train::PackedRow shard = dist::shard_row(row_dev, mesh.ulysses_group.get(), mesh.ring_group.get(), -1);
  const torch::Tensor idx = shard.input_ids[0];
  const torch::Tensor valid = idx.ge(0), safe = idx.clamp_min(0);
  const std::int64_t n = idx.size(0);
  auto local = [&](const torch::Tensor& full) {
    const torch::Tensor noise = torch::randn({n, full.size(1), d}, full.options()) * 3;  // on padding rows
    return torch::where(valid.view({n, 1, 1}), full.index_select(0, safe), noise).clone().requires_grad_(true);
  };
  torch::Tensor ql = local(qb), kl = local(kb), vl = local(vb);
  c10::cuda::device_synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t ran = -1;
  const torch::Tensor out = shard.attention->attend(ql, kl, vl, scale, c.prefer, &ran, nullptr);
  (out.to(torch::kFloat32) * torch::where(valid.view({n, 1, 1}), w.index_select(0, safe), torch::zeros({}, f32)))
      .sum()
      .backward();
  c10::cuda::device_synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const torch::Tensor real = safe.index({valid});
  auto err = [&](const torch::Tensor& got, const torch::Tensor& want) {
    return rel(got.index({valid}), want.index_select(0, real));
  };
  auto floor_of = [&](const torch::Tensor& got, const torch::Tensor& want) {
    return rel(got.index_select(0, real), want.index_select(0, real));
  };
  const double e[4] = {err(out, ref.out), err(ql.grad(), ref.dq), err(kl.grad(), ref.dk), err(vl.grad(), ref.dv)};
  const double fl[4] = {floor_of(one.out, ref.out), floor_of(one.dq, ref.dq), floor_of(one.dk, ref.dk),
                        floor_of(one.dv, ref.dv)};
  const torch::Tensor pad = valid.logical_not();
  const double pad_grad = pad.any().item<bool>() ? std::max({ql.grad().index({pad}).abs().max().item<double>(),
                                                             kl.grad().index({pad}).abs().max().item<double>(),
                                                             vl.grad().index({pad}).abs().max().item<double>()})
                                                 : 0.0;
  bool ok = pad_grad == 0.0;
  for (int i = 0; i < 4; ++i) ok = ok && e[i] <= 2 * fl[i] + 1.0 / 256;
  std::printf(
      "{\"rank\": %d, \"case\": \"%s\", \"ulysses\": %d, \"ring\": %d, \"tokens\": %ld, \"local_tokens\": %ld, "
      "\"backend\": \"%s\", \"out\": [%.3g, %.3g], \"dq\": [%.3g, %.3g], \"dk\": [%.3g, %.3g], "
      "\"dv\": [%.3g, %.3g], \"padding_grad\": %.3g, \"seconds\": %.3f, \"ok\": %s}\n",
      rank, c.name, c.ulysses, c.ring, static_cast<long>(t), static_cast<long>(n),
      ran < 0 ? "reference" : model::sdp_backend_name(ran).c_str(), e[0], fl[0], e[1], fl[1], e[2], fl[2], e[3], fl[3],
      pad_grad, seconds, ok ? "true" : "false");
  std::fflush(stdout);
  return ok;
}

}  // namespace

int main() {
  std::string error;
  const dist::DistEnv env = dist::read_dist_env(&error);
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (!env.from_environment) {  // not a rank: start two, through the engine's launcher
    if (!torch::cuda::is_available() || torch::cuda::device_count() < 2) {
      std::fprintf(stderr, "skipped: needs two CUDA GPUs\n");
      return 77;
    }
    dist::LaunchOptions o;
    o.executable = std::filesystem::read_symlink("/proc/self/exe").string();
    o.nproc = 2;
    o.use_gpus = true;
    o.gpu_ids = {0, 1};
    o.run_dir = std::filesystem::temp_directory_path() / ("odyssey-sp-gpu-" + std::to_string(::getpid()));
    int code = 1;
    {  // the launcher supervises a directory its caller owns (run/run_lock.h)
      const auto claim = run::claim_run_dir(run::RunDir(o.run_dir));
      if (!claim.ok()) {
        std::fprintf(stderr, "%s", format_all(claim.diagnostics).c_str());
        return 1;
      }
      code = dist::launch(o);
    }
    std::filesystem::remove_all(o.run_dir);
    return code;
  }
  if (env.world < 2) {
    std::fprintf(stderr, "needs two or more ranks\n");
    return 77;
  }
  if (!torch::cuda::is_available() || torch::cuda::device_count() <= env.local_rank) {
    std::fprintf(stderr, "rank %d: no GPU %d\n", env.rank, env.local_rank);
    return 77;
  }
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  c10::cuda::set_device(device.index());
  const auto timeout = std::chrono::milliseconds(std::chrono::minutes(2));
  const auto store = dist::connect_store(env, timeout);
  const int w = env.world;
  // The "/ 2" rows: each carries (ids) one sample of odd length or packed samples, so every
  // split pads; lengths are kept moderate so the fp32 masked oracle fits one GPU.
  const std::vector<Case> cases = {
      {"ring, one sample (cuDNN blocks)", 1, w, {8191}},
      {"ring, one sample (flash blocks)", 1, w, {8191}, model::AttentionBackend::Flash},
      {"ring, packed samples (varlen flash blocks)", 1, w, {1000, 3001, 17, 2500}},
      {"Ulysses, one sample (cuDNN)", w, 1, {8191}},
      {"Ulysses, packed samples (varlen flash)", w, 1, {1000, 3001, 17, 2500}},
  };
  bool ok = true;
  int index = 0;
  for (const Case& c : cases) {
    ParallelLayout layout;
    layout.world_size = w;
    layout.ulysses = c.ulysses;
    layout.ring = c.ring;
    layout.sp = w;
    layout.dp = 1;
    try {
      // Each case's groups rendezvous under their own prefix.
      const auto prefixed = c10::make_intrusive<c10d::PrefixStore>("case" + std::to_string(index++), store);
      const dist::Mesh mesh = dist::build_mesh(env, layout, dist::Transport::Nccl, prefixed, device, timeout);
      ok = run_case(c, mesh, device, env.rank) && ok;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d, %s: %s\n", env.rank, c.name, e.what());
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
