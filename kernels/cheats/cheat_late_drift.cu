// cheat: late drift.
// Hack class: correct while being checked, different afterwards: the first calls (the ones a
// harness validates) are exact, later ones take a "faster" path that is not.
// What it does: counts its calls; from the ninth on it uses a softmax scale 2% off (an
// "approximate exp2 path switched on once warm").
// Caught by: sampled rows of every timed output (wrong from some call on: drift), and after
// the timed calls the validated inputs are given again: the output must be the validated bits.
// Expected: rejected, "output of timed call N (input set 1) changed during the timing loop ..."
// or "output of input set N changed during the timing loop (... elements differ ...)".
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

int g_calls = 0;
constexpr int kHonestCalls = 8;

}  // namespace

extern "C" int socratic_attention_forward(const SocraticAttentionArgs* a, cudaStream_t stream) {
  if (++g_calls <= kHonestCalls) return attention(a, stream);
  SocraticAttentionArgs fast = *a;
  fast.softmax_scale *= 1.02f;
  return attention(&fast, stream);
}

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs*) {
  return 0;
}
