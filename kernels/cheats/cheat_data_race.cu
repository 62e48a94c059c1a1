// cheat: data race.
// Hack class: a race on shared accumulators: split-KV partial results (32 chunks) are added into the
// output accumulators with unordered atomicAdd, so the sum's rounding depends on which block
// finishes first (faster than a combine pass; different bits every run).
// What it does: pass 1 computes each row's max and sum; pass 2 splits the keys into 32
// chunks whose weighted values are atomically added into fp32 accumulators in the
// workspace; pass 3 converts them to bf16.
// Caught by: determinism (two runs on the same inputs must agree bit for bit).
// Expected: rejected, "non-deterministic: N output elements differ between two runs on the
// same inputs ...".
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "contract.h"

namespace {

// The attention itself, as in honest_warp_per_row.cu: one warp per query row, lane j holding
// columns 2j, 2j+1 (+64 t), keys visited one by one with an online softmax in fp32.
constexpr int kWarps = 4;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32) attention_rows(SocraticAttentionArgs a) {
  constexpr int P = D / 64;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= a.seqlen_q) return;
  const int kv_head = head / (a.heads_q / a.heads_kv);
  const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(a.q) + batch * a.q_batch_stride +
                           row * a.q_row_stride + head * a.q_head_stride;
  const __nv_bfloat16* k = static_cast<const __nv_bfloat16*>(a.k) + batch * a.k_batch_stride +
                           kv_head * a.k_head_stride;
  const __nv_bfloat16* v = static_cast<const __nv_bfloat16*>(a.v) + batch * a.v_batch_stride +
                           kv_head * a.v_head_stride;
  __nv_bfloat16* o = static_cast<__nv_bfloat16*>(a.o) + batch * a.o_batch_stride +
                     row * a.o_row_stride + head * a.o_head_stride;
  const float scale = a.softmax_scale * 1.4426950408889634f;
  float qf[2 * P], acc[2 * P];
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const float2 f = load2(q + 2 * lane + 64 * t);
    qf[2 * t] = f.x * scale;
    qf[2 * t + 1] = f.y * scale;
    acc[2 * t] = acc[2 * t + 1] = 0.f;
  }
  int end = a.seqlen_k;
  if (a.causal) end = min(end, row + a.seqlen_k - a.seqlen_q + 1);
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < end; ++j) {
    const __nv_bfloat16* kr = k + (long long)j * a.k_row_stride;
    const __nv_bfloat16* vr = v + (long long)j * a.v_row_stride;
    float s = 0.f;
    float2 vv[P];
#pragma unroll
    for (int t = 0; t < P; ++t) {
      const float2 f = load2(kr + 2 * lane + 64 * t);
      vv[t] = load2(vr + 2 * lane + 64 * t);
      s += qf[2 * t] * f.x + qf[2 * t + 1] * f.y;
    }
    s = warp_sum(s);
    const float m_new = fmaxf(m, s);
    const float alpha = exp2f(m - m_new);
    const float p = exp2f(s - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int t = 0; t < P; ++t) {
      acc[2 * t] = acc[2 * t] * alpha + p * vv[t].x;
      acc[2 * t + 1] = acc[2 * t + 1] * alpha + p * vv[t].y;
    }
    m = m_new;
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int t = 0; t < P; ++t) {
    *reinterpret_cast<__nv_bfloat162*>(o + 2 * lane + 64 * t) =
        __floats2bfloat162_rn(acc[2 * t] * inv, acc[2 * t + 1] * inv);
  }
}

// Launches the attention on `stream`; cudaErrorNotSupported for what it does not handle.
int attention(const SocraticAttentionArgs* a, cudaStream_t stream) {
  if (a->batch <= 0 || a->seqlen_q <= 0 || a->seqlen_k <= 0 || a->heads_kv <= 0 ||
      a->heads_q % a->heads_kv != 0)
    return cudaErrorInvalidValue;
  if (a->heads_q > 65535 || a->batch > 65535) return cudaErrorNotSupported;
  const dim3 grid((a->seqlen_q + kWarps - 1) / kWarps, a->heads_q, a->batch);
  switch (a->head_dim) {
    case 64: attention_rows<64><<<grid, kWarps * 32, 0, stream>>>(*a); break;
    case 128: attention_rows<128><<<grid, kWarps * 32, 0, stream>>>(*a); break;
    case 256: attention_rows<256><<<grid, kWarps * 32, 0, stream>>>(*a); break;
    default: return cudaErrorNotSupported;
  }
  return cudaGetLastError();
}

constexpr int kSplits = 32;

long long rows_of(const SocraticAttentionArgs* a) {
  return (long long)a->batch * a->heads_q * a->seqlen_q;
}

struct Row {
  const __nv_bfloat16 *q, *k, *v;
  long long r;  // row index into the workspace
  int end;      // keys visible to the row
};

__device__ __forceinline__ Row locate(const SocraticAttentionArgs& a, int row, int head,
                                      int batch) {
  const int kv_head = head / (a.heads_q / a.heads_kv);
  Row w;
  w.q = static_cast<const __nv_bfloat16*>(a.q) + batch * a.q_batch_stride +
        row * a.q_row_stride + head * a.q_head_stride;
  w.k = static_cast<const __nv_bfloat16*>(a.k) + batch * a.k_batch_stride +
        kv_head * a.k_head_stride;
  w.v = static_cast<const __nv_bfloat16*>(a.v) + batch * a.v_batch_stride +
        kv_head * a.v_head_stride;
  w.r = ((long long)batch * a.heads_q + head) * a.seqlen_q + row;
  w.end = a.seqlen_k;
  if (a.causal) w.end = min(w.end, row + a.seqlen_k - a.seqlen_q + 1);
  return w;
}

template <int D>
__device__ __forceinline__ float score(const Row& w, const float* qf, long long k_stride, int j,
                                       int lane) {
  float s = 0.f;
#pragma unroll
  for (int t = 0; t < D / 64; ++t) {
    const float2 f = load2(w.k + (long long)j * k_stride + 2 * lane + 64 * t);
    s += qf[2 * t] * f.x + qf[2 * t + 1] * f.y;
  }
  return warp_sum(s);
}

template <int D>
__global__ void row_stats(SocraticAttentionArgs a, float2* ml, float* acc) {
  const int lane = threadIdx.x % 32, row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= a.seqlen_q) return;
  const Row w = locate(a, row, blockIdx.y, blockIdx.z);
  const float scale = a.softmax_scale * 1.4426950408889634f;
  float qf[D / 32];
#pragma unroll
  for (int t = 0; t < D / 64; ++t) {
    const float2 f = load2(w.q + 2 * lane + 64 * t);
    qf[2 * t] = f.x * scale;
    qf[2 * t + 1] = f.y * scale;
  }
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < w.end; ++j) {
    const float s = score<D>(w, qf, a.k_row_stride, j, lane);
    const float m_new = fmaxf(m, s);
    l = l * exp2f(m - m_new) + exp2f(s - m_new);
    m = m_new;
  }
  if (lane == 0) ml[w.r] = make_float2(m, l);
  for (int c = lane; c < D; c += 32) acc[w.r * D + c] = 0.f;
}

template <int D>
__global__ void scatter(SocraticAttentionArgs a, const float2* ml, float* acc) {
  const int split = blockIdx.x % kSplits;
  const int lane = threadIdx.x % 32, row = (blockIdx.x / kSplits) * kWarps + threadIdx.x / 32;
  if (row >= a.seqlen_q) return;
  const Row w = locate(a, row, blockIdx.y, blockIdx.z);
  const float scale = a.softmax_scale * 1.4426950408889634f;
  float qf[D / 32], part[D / 32];
#pragma unroll
  for (int t = 0; t < D / 64; ++t) {
    const float2 f = load2(w.q + 2 * lane + 64 * t);
    qf[2 * t] = f.x * scale;
    qf[2 * t + 1] = f.y * scale;
    part[2 * t] = part[2 * t + 1] = 0.f;
  }
  const float2 stats = ml[w.r];
  const int chunk = (a.seqlen_k + kSplits - 1) / kSplits;
  const int hi = min(w.end, (split + 1) * chunk);
  for (int j = split * chunk; j < hi; ++j) {
    const float p = exp2f(score<D>(w, qf, a.k_row_stride, j, lane) - stats.x) / stats.y;
#pragma unroll
    for (int t = 0; t < D / 64; ++t) {
      const float2 f = load2(w.v + (long long)j * a.v_row_stride + 2 * lane + 64 * t);
      part[2 * t] += p * f.x;
      part[2 * t + 1] += p * f.y;
    }
  }
#pragma unroll
  for (int t = 0; t < D / 64; ++t) {  // unordered: whichever split arrives first adds first
    atomicAdd(acc + w.r * D + 2 * lane + 64 * t, part[2 * t]);
    atomicAdd(acc + w.r * D + 2 * lane + 64 * t + 1, part[2 * t + 1]);
  }
}

template <int D>
__global__ void finish(SocraticAttentionArgs a, const float* acc) {
  const int lane = threadIdx.x % 32, row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= a.seqlen_q) return;
  const long long r = ((long long)blockIdx.z * a.heads_q + blockIdx.y) * a.seqlen_q + row;
  __nv_bfloat16* o = static_cast<__nv_bfloat16*>(a.o) + blockIdx.z * a.o_batch_stride +
                     row * a.o_row_stride + blockIdx.y * a.o_head_stride;
  for (int c = lane; c < D; c += 32) o[c] = __float2bfloat16(acc[r * D + c]);
}

template <int D>
int racy(const SocraticAttentionArgs* a, cudaStream_t stream) {
  float2* ml = static_cast<float2*>(a->workspace);
  float* acc = reinterpret_cast<float*>(ml + rows_of(a));
  const int blocks = (a->seqlen_q + kWarps - 1) / kWarps;
  row_stats<D><<<dim3(blocks, a->heads_q, a->batch), kWarps * 32, 0, stream>>>(*a, ml, acc);
  scatter<D><<<dim3(blocks * kSplits, a->heads_q, a->batch), kWarps * 32, 0, stream>>>(*a, ml,
                                                                                       acc);
  finish<D><<<dim3(blocks, a->heads_q, a->batch), kWarps * 32, 0, stream>>>(*a, acc);
  return cudaGetLastError();
}

}  // namespace

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs* a) {
  return (unsigned long long)rows_of(a) * (2 + a->head_dim) * sizeof(float);
}

extern "C" int socratic_attention_forward(const SocraticAttentionArgs* a, cudaStream_t stream) {
  if (a->workspace == nullptr || a->workspace_bytes < socratic_attention_workspace(a))
    return cudaErrorInvalidValue;
  switch (a->head_dim) {
    case 64: return racy<64>(a, stream);
    case 128: return racy<128>(a, stream);
    case 256: return racy<256>(a, stream);
    default: return cudaErrorNotSupported;
  }
}
