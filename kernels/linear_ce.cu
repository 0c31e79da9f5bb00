// The fused linear cross-entropy's row step on the GPU (kernels/linear_ce.h): for one chunk
// of logits [rows, vocab] in the activations' dtype, per row in fp32 the loss
// logsumexp − logit[target] and, when a gradient is wanted, softmax − onehot(target)
// written over the row in place. No LibTorch headers: raw pointers and a stream
// (kernels/linear_ce_launch.h).
//
// One block of kThreads threads per row (grid-stride over rows). Pass 1 reads the row once
// with 128-bit loads (a scalar head up to the first 16-byte boundary, packs, a scalar
// tail), each thread keeping an online (max, Σ exp(x − max)) pair, merged across the warp
// with shuffles and across warps through shared memory. Pass 2 (gradient only) reads the
// row again and stores exp(x − max) / Σ − [j == target], rounded once to the dtype. All
// offsets are int64 (rows·vocab may exceed 2^31).
//
// Pass 2 multiplies by the reciprocal of Σ, computed once per row: with a division per
// element the kernel was bound by its arithmetic (11.2 ms for Qwen2.5-0.5B's 32K tokens of
// 152K logits, against 8.7 with the product; a one-read variant on thread-block clusters,
// each block keeping its slice of the row in shared memory, took 13.7: one or two blocks per
// SM could not overlap their loads with the exponentials).
//
// With a gradient, rows that fit take linear_ce_cluster_kernel instead: a cluster of kCluster
// blocks shares a row, each block holding its slice in registers (at most K 16-byte packs per
// thread), so the row is read from memory once, not twice. The blocks' (max, Σ) pairs meet
// through distributed shared memory between two cluster barriers. Up to 5 packs a thread
// (Qwen's 152K bf16 rows) keep three blocks on an SM, 8 packs two, so one block's loads
// overlap another's exponentials (the shared-memory cluster variant above had one or two).
// Exponentials are one FMA and ex2 (exp(x − m) = 2^(x·log2 e − m·log2 e)); bf16/f16 results
// are stored by paired conversions. On an H200, 2048 rows of 151,936 bf16 logits: 0.372 ms
// against the two-pass kernel's 0.463 (odyssey-bench --check).
//
// Tolerance: `odyssey-train selftest` (kernels/selftest.cpp) evaluates this kernel, its reference
// (kernels/linear_ce_ref.cpp) in the same dtype and the reference on float64 inputs; every output
// and gradient must be within 2 × the reference's own error plus one unit roundoff of the dtype
// (2^-8 bf16, 2^-24 fp32) of the float64 result. The bound is derived from the reference's rounding
// on each shape, not chosen.
// Source of the formula: torch's cross_entropy over logits = hidden · Wᵀ upcast to fp32, reduction
// sum, ignore_index −100 (what the unfused loss computes).
#include "kernels/linear_ce_launch.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace odyssey::kernels::launch {
namespace {

constexpr int kThreads = 512;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr std::int64_t kMaxGrid = 1 << 20;  // rows beyond this are taken by the grid-stride loop

template <class T>
struct Io;
template <>
struct Io<float> {
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <>
struct Io<__nv_bfloat16> {
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct Io<__half> {
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};

// 16 bytes of T: one 128-bit load or store.
template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = static_cast<int>(16 / sizeof(T));
  T v[kSize];
};

// Running maximum m and Σ exp(x − m) of the values seen so far; empty is {−inf, 0}.
struct Stat {
  float m;
  float s;
};

// Adds K values. −inf values add nothing; a NaN value makes s NaN (as the reference's loss).
template <int K>
__device__ __forceinline__ void add(Stat& a, const float (&x)[K]) {
  float pm = x[0];
#pragma unroll
  for (int i = 1; i < K; ++i) pm = fmaxf(pm, x[i]);
  if (pm > a.m) {
    a.s *= expf(a.m - pm);  // a.m == −inf: exp(−inf) = 0, and a.s is 0 anyway
    a.m = pm;
  }
#pragma unroll
  for (int i = 0; i < K; ++i) a.s += x[i] == -INFINITY ? 0.0f : expf(x[i] - a.m);
}

__device__ __forceinline__ void merge(Stat& a, const Stat& b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return;  // both empty
  a.s = a.s * expf(a.m - m) + b.s * expf(b.m - m);
  a.m = m;
}

// The merged Stat of the whole block, in every thread. `shared` holds 32 Stats; the call
// ends with a barrier so that the next row may reuse it.
__device__ Stat block_reduce(Stat st, Stat* shared) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Stat other{__shfl_xor_sync(kFullMask, st.m, offset), __shfl_xor_sync(kFullMask, st.s, offset)};
    merge(st, other);
  }
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = st;
  __syncthreads();
  if (warp == 0) {
    const unsigned warps = blockDim.x >> 5;
    st = lane < warps ? shared[lane] : Stat{-INFINITY, 0.0f};
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const Stat other{__shfl_xor_sync(kFullMask, st.m, offset), __shfl_xor_sync(kFullMask, st.s, offset)};
      merge(st, other);
    }
    if (lane == 0) shared[0] = st;  // every lane of warp 0 has read shared[] before the shuffles
  }
  __syncthreads();
  const Stat result = shared[0];
  __syncthreads();
  return result;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    linear_ce_rows_kernel(T* __restrict__ logits, const std::int64_t* __restrict__ targets, float* __restrict__ loss,
                          std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index, bool write_grad) {
  __shared__ Stat shared[32];
  constexpr int kPack = Pack<T>::kSize;
  const std::int64_t tid = threadIdx.x;
  const std::int64_t stride = blockDim.x;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    T* x = logits + row * vocab;
    // Split the row at 16-byte boundaries: [0, head) scalar, `packs` Pack<T>s, [tail, vocab) scalar.
    const auto misalign = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(x) & 15u);
    std::int64_t head = ((16 - misalign) & 15) / static_cast<std::int64_t>(sizeof(T));
    if (head > vocab) head = vocab;
    const std::int64_t packs = (vocab - head) / kPack;
    const std::int64_t tail = head + packs * kPack;
    Pack<T>* body = reinterpret_cast<Pack<T>*>(x + head);

    const std::int64_t target = targets[row];  // the same in every thread: the branches below are uniform
    if (target == ignore_index || target < 0 || target >= vocab) {
      if (tid == 0) loss[row] = target == ignore_index ? 0.0f : __int_as_float(0x7fc00000);  // NaN: bad target
      if (write_grad) {
        const T zero = Io<T>::store(0.0f);
        Pack<T> zeros;
#pragma unroll
        for (int i = 0; i < kPack; ++i) zeros.v[i] = zero;
        for (std::int64_t j = tid; j < head; j += stride) x[j] = zero;
        for (std::int64_t p = tid; p < packs; p += stride) body[p] = zeros;
        for (std::int64_t j = tail + tid; j < vocab; j += stride) x[j] = zero;
      }
      continue;
    }

    // Pass 1: max and Σ exp. Thread 0 also reads the target's logit, before the barrier
    // in block_reduce that precedes every write of pass 2.
    const float x_target = tid == 0 ? Io<T>::load(x[target]) : 0.0f;
    Stat st{-INFINITY, 0.0f};
    for (std::int64_t j = tid; j < head; j += stride) {
      const float v[1] = {Io<T>::load(x[j])};
      add(st, v);
    }
    for (std::int64_t p = tid; p < packs; p += stride) {
      const Pack<T> pk = body[p];
      float v[kPack];
#pragma unroll
      for (int i = 0; i < kPack; ++i) v[i] = Io<T>::load(pk.v[i]);
      add(st, v);
    }
    for (std::int64_t j = tail + tid; j < vocab; j += stride) {
      const float v[1] = {Io<T>::load(x[j])};
      add(st, v);
    }
    st = block_reduce(st, shared);
    // −log softmax[target] = (max − x_t) + log Σ exp(x − max)
    if (tid == 0) loss[row] = (st.m - x_target) + logf(st.s);
    if (!write_grad) continue;

    // Pass 2: softmax − onehot, rounded once to T.
    const float m = st.m;
    const float inv = 1.0f / st.s;  // one division per row, a product per element
    for (std::int64_t j = tid; j < head; j += stride) {
      const float p = expf(Io<T>::load(x[j]) - m) * inv;
      x[j] = Io<T>::store(j == target ? p - 1.0f : p);
    }
    for (std::int64_t p = tid; p < packs; p += stride) {
      Pack<T> pk = body[p];
      const std::int64_t j0 = head + p * kPack;
#pragma unroll
      for (int i = 0; i < kPack; ++i) {
        const float q = expf(Io<T>::load(pk.v[i]) - m) * inv;
        pk.v[i] = Io<T>::store(j0 + i == target ? q - 1.0f : q);
      }
      body[p] = pk;
    }
    for (std::int64_t j = tail + tid; j < vocab; j += stride) {
      const float p = expf(Io<T>::load(x[j]) - m) * inv;
      x[j] = Io<T>::store(j == target ? p - 1.0f : p);
    }
  }
}

// 2^x on the special-function unit (relative error about 2^-22; −inf gives 0): exp(x − m) is
// ex2(x·log2 e − m·log2 e), one FMA and one ex2 where expf takes several instructions.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;

// Word j (0..3) of a pack; j is a constant once the callers' loops are unrolled.
__device__ __forceinline__ unsigned& word(uint4& r, int j) { return j == 0 ? r.x : j == 1 ? r.y : j == 2 ? r.z : r.w; }
__device__ __forceinline__ unsigned word(const uint4& r, int j) {
  return j == 0 ? r.x : j == 1 ? r.y : j == 2 ? r.z : r.w;
}

// A 16-byte pack held as raw words (uint4) in the cluster kernel: element i read as fp32 by
// bit operations on the word that holds it (bf16 → fp32 is exact as a shift), elements i and
// i + 1 (i even) written back rounded. Raw words keep the register use of a pack at four
// (typed packs of bf16 spilled).
__device__ __forceinline__ unsigned halves(unsigned short lo, unsigned short hi) {
  return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
}

template <class T>
struct Lanes;
template <>
struct Lanes<float> {
  static constexpr int kCount = 4;
  __device__ static float get(const uint4& r, int i) { return __uint_as_float(word(r, i)); }
  __device__ static void set_pair(uint4& r, int i, float a, float b) {
    word(r, i) = __float_as_uint(a);
    word(r, i + 1) = __float_as_uint(b);
  }
};
template <>
struct Lanes<__nv_bfloat16> {
  static constexpr int kCount = 8;
  __device__ static float get(const uint4& r, int i) {
    const unsigned w = word(r, i >> 1);
    return __uint_as_float((i & 1) != 0 ? (w & 0xffff0000u) : (w << 16));
  }
  __device__ static void set_pair(uint4& r, int i, float a, float b) {  // one paired conversion
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    word(r, i >> 1) = halves(__bfloat16_as_ushort(v.x), __bfloat16_as_ushort(v.y));
  }
};
template <>
struct Lanes<__half> {
  static constexpr int kCount = 8;
  __device__ static float get(const uint4& r, int i) {
    const unsigned w = word(r, i >> 1);
    return __half2float(__ushort_as_half(static_cast<unsigned short>((i & 1) != 0 ? (w >> 16) : (w & 0xffffu))));
  }
  __device__ static void set_pair(uint4& r, int i, float a, float b) {
    const __half2 v = __floats2half2_rn(a, b);
    word(r, i >> 1) = halves(__half_as_ushort(v.x), __half_as_ushort(v.y));
  }
};

// The row step with the gradient, one row per cluster of kCluster blocks (grid-stride over
// rows by clusters). Rows are 16-byte aligned and a whole number of packs (the launcher
// checks); block `rank` owns packs [rank·per_block, min(packs, (rank + 1)·per_block)), thread t
// of it the packs t, t + kClusterThreads, … of that slice, at most K of them, in registers.
constexpr int kCluster = 8;
constexpr int kClusterThreads = 512;

template <class T, int K>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kClusterThreads, K <= 5 ? 3 : 2)
    linear_ce_cluster_kernel(T* __restrict__ logits, const std::int64_t* __restrict__ targets, float* __restrict__ loss,
                             std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  __shared__ Stat shared[32];
  __shared__ Stat slice;  // this block's (max, Σ) of its slice, read by the whole cluster
  constexpr int kPack = Lanes<T>::kCount;
  using L = Lanes<T>;
  // Offsets inside a row are int32: a qualifying row has at most 2^19 elements.
  const int tid = static_cast<int>(threadIdx.x);
  const int rank = static_cast<int>(cluster.block_rank());
  const int packs = static_cast<int>(vocab / kPack);
  const int per_block = (packs + kCluster - 1) / kCluster;
  const int first = rank * per_block + tid;  // this thread's first pack
  const int end = min(packs, (rank + 1) * per_block);
  const std::int64_t clusters = gridDim.x / kCluster;
  for (std::int64_t row = blockIdx.x / kCluster; row < rows; row += clusters) {
    uint4* body = reinterpret_cast<uint4*>(logits + row * vocab);
    const std::int64_t target64 = targets[row];  // uniform in the cluster
    if (target64 == ignore_index || target64 < 0 || target64 >= vocab) {
      if (rank == 0 && tid == 0) loss[row] = target64 == ignore_index ? 0.0f : __int_as_float(0x7fc00000);
      const uint4 zeros = make_uint4(0u, 0u, 0u, 0u);  // +0 in every dtype
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int p = first + k * kClusterThreads;
        if (p < end) body[p] = zeros;
      }
      continue;
    }
    const int target = static_cast<int>(target64);
    // Block 0 reads the target's logit before the first cluster barrier; its owner writes it
    // only after that barrier.
    const float x_target = rank == 0 && tid == 0 ? Io<T>::load(logits[row * vocab + target]) : 0.0f;
    uint4 reg[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {  // every load issued before any arithmetic
      const int p = first + k * kClusterThreads;
      if (p < end) reg[k] = body[p];
    }
    // The thread's maximum first, then Σ exp(x − max) with that one maximum: no rescaling,
    // and one element converted at a time (fewer live registers than add()'s eight).
    Stat st{-INFINITY, 0.0f};
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (first + k * kClusterThreads < end) {
#pragma unroll
        for (int i = 0; i < kPack; ++i) st.m = fmaxf(st.m, L::get(reg[k], i));
      }
    if (st.m != -INFINITY) {  // all −inf (or no pack): the empty pair
      const float ms = st.m * kLog2e;
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (first + k * kClusterThreads < end) {
#pragma unroll
          for (int i = 0; i < kPack; ++i) st.s += ex2(fmaf(L::get(reg[k], i), kLog2e, -ms));
        }
    }
    st = block_reduce(st, shared);
    if (tid == 0) slice = st;
    cluster.sync();  // every block's slice pair is written
    if (tid < 32) {  // warp 0 merges the cluster's pairs (lane r reads block r's)
      Stat all = tid < kCluster ? *cluster.map_shared_rank(&slice, static_cast<unsigned>(tid)) : Stat{-INFINITY, 0.0f};
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        const Stat other{__shfl_xor_sync(kFullMask, all.m, offset), __shfl_xor_sync(kFullMask, all.s, offset)};
        merge(all, other);
      }
      if (tid == 0) shared[0] = all;
    }
    cluster.sync();  // the pairs are read (the next row may overwrite `slice`) and shared[0] is set
    const Stat all = shared[0];
    if (rank == 0 && tid == 0) loss[row] = (all.m - x_target) + logf(all.s);
    const float inv = 1.0f / all.s, ms = all.m * kLog2e;
    auto prob = [&](float x, int j) {
      const float q = ex2(fmaf(x, kLog2e, -ms)) * inv;
      return j == target ? q - 1.0f : q;
    };
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int p = first + k * kClusterThreads;
      if (p < end) {
        const int j0 = p * kPack;
        uint4 out;
#pragma unroll
        for (int i = 0; i < kPack; i += 2)
          L::set_pair(out, i, prob(L::get(reg[k], i), j0 + i), prob(L::get(reg[k], i + 1), j0 + i + 1));
        body[p] = out;
      }
    }
    __syncthreads();  // shared[0] is read by every thread before the next row's block_reduce
  }
}

// Packs per thread the cluster kernel needs for `vocab`, or 0 when the row does not qualify.
template <class T>
int cluster_packs(const void* logits, std::int64_t vocab) {
  constexpr std::int64_t pack = 16 / static_cast<std::int64_t>(sizeof(T));
  if ((reinterpret_cast<std::uintptr_t>(logits) & 15u) != 0 || vocab % pack != 0) return 0;
  if (vocab > (std::int64_t{1} << 20)) return 0;
  const std::int64_t per_block = (vocab / pack + kCluster - 1) / kCluster;
  const std::int64_t per_thread = (per_block + kClusterThreads - 1) / kClusterThreads;
  return per_thread <= 5 ? 5 : per_thread <= 8 ? 8 : 0;
}

template <class T>
void launch(void* logits, const std::int64_t* targets, float* loss, std::int64_t rows, std::int64_t vocab,
            std::int64_t ignore_index, bool write_grad, int variant, cudaStream_t stream) {
  const int k = write_grad && variant != kLinearCeTwoPass ? cluster_packs<T>(logits, vocab) : 0;
  if (k > 0) {
    const std::int64_t clusters = rows < kMaxGrid / kCluster ? rows : kMaxGrid / kCluster;
    const auto grid = static_cast<unsigned>(clusters * kCluster);
    if (k == 5)
      linear_ce_cluster_kernel<T, 5>
          <<<grid, kClusterThreads, 0, stream>>>(static_cast<T*>(logits), targets, loss, rows, vocab, ignore_index);
    else
      linear_ce_cluster_kernel<T, 8>
          <<<grid, kClusterThreads, 0, stream>>>(static_cast<T*>(logits), targets, loss, rows, vocab, ignore_index);
    return;
  }
  const auto grid = static_cast<unsigned>(rows < kMaxGrid ? rows : kMaxGrid);
  linear_ce_rows_kernel<T>
      <<<grid, kThreads, 0, stream>>>(static_cast<T*>(logits), targets, loss, rows, vocab, ignore_index, write_grad);
}

}  // namespace

const char* linear_ce_rows(void* logits, const std::int64_t* targets, float* loss, std::int64_t rows,
                           std::int64_t vocab, std::int64_t ignore_index, int dtype, bool write_grad, void* stream,
                           int variant) {
  if (rows < 0 || vocab <= 0) return "linear_ce_rows: rows must be >= 0 and vocab > 0";
  if (rows == 0) return nullptr;
  if (logits == nullptr || targets == nullptr || loss == nullptr) return "linear_ce_rows: null pointer";
  if (variant != kLinearCeAuto && variant != kLinearCeTwoPass) return "linear_ce_rows: unknown kernel variant";
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kLinearCeF32: launch<float>(logits, targets, loss, rows, vocab, ignore_index, write_grad, variant, s); break;
    case kLinearCeBf16:
      launch<__nv_bfloat16>(logits, targets, loss, rows, vocab, ignore_index, write_grad, variant, s);
      break;
    case kLinearCeF16: launch<__half>(logits, targets, loss, rows, vocab, ignore_index, write_grad, variant, s); break;
    default: return "linear_ce_rows: unsupported dtype code (0 f32, 1 bf16, 2 f16)";
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace odyssey::kernels::launch
