// honest: split-KV with a combine pass (ABI v1), the decode-style layout.
//
// Style: the keys of each row are split into up to 16 chunks so that short query lengths
// (decode, chunked prefill) still fill the GPU. Pass 1: one warp per (row, chunk); keys are
// taken 32 at a time, lane j computing the full dot product of key j with q (held in shared
// memory as fp32, read as broadcasts), then the online-softmax update and P.V with the
// weights passed by shuffles. Each chunk writes its unnormalized output and (max, sum) to the
// workspace. Pass 2: one warp per row merges the chunks in a fixed order (deterministic).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "contract.h"

namespace {

constexpr int kWarps = 4;
constexpr int kMaxSplits = 16;
constexpr unsigned long long kSplitBudget = 256ull << 20;  // workspace bytes worth splitting

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

long long rows_of(const SocraticAttentionArgs* a) {
  return (long long)a->batch * a->heads_q * a->seqlen_q;
}

int splits_for(const SocraticAttentionArgs* a) {
  int splits = (a->seqlen_k + 511) / 512;
  splits = splits < 1 ? 1 : (splits > kMaxSplits ? kMaxSplits : splits);
  const unsigned long long per_split = (unsigned long long)rows_of(a) * (a->head_dim + 2) * 4;
  while (splits > 1 && per_split * splits > kSplitBudget) splits /= 2;
  return splits;
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32) partials(SocraticAttentionArgs a, int splits,
                                                        float* part_o, float2* part_ml) {
  __shared__ __align__(16) float q_s[kWarps][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + warp;
  const int head = blockIdx.y;
  const int split = blockIdx.z % splits, batch = blockIdx.z / splits;
  const int kv_head = head / (a.heads_q / a.heads_kv);
  const bool active = row < a.seqlen_q;
  const float scale = a.softmax_scale * 1.4426950408889634f;
  if (active) {
    const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(a.q) + batch * a.q_batch_stride +
                             row * a.q_row_stride + head * a.q_head_stride;
    for (int c = lane; c < D; c += 32) q_s[warp][c] = __bfloat162float(q[c]) * scale;
  }
  __syncwarp();
  if (!active) return;

  const __nv_bfloat16* k = static_cast<const __nv_bfloat16*>(a.k) + batch * a.k_batch_stride +
                           kv_head * a.k_head_stride;
  const __nv_bfloat16* v = static_cast<const __nv_bfloat16*>(a.v) + batch * a.v_batch_stride +
                           kv_head * a.v_head_stride;
  int end = a.seqlen_k;
  if (a.causal) end = min(end, row + a.seqlen_k - a.seqlen_q + 1);
  const int chunk = (a.seqlen_k + splits - 1) / splits;
  const int lo = split * chunk;
  const int hi = min(end, lo + chunk);

  constexpr int P = D / 64;
  float acc[2 * P];
#pragma unroll
  for (int t = 0; t < 2 * P; ++t) acc[t] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int base = lo; base < hi; base += 32) {
    const int j = base + lane;
    float s = -INFINITY;
    if (j < hi) {
      const __nv_bfloat16* kr = k + (long long)j * a.k_row_stride;
      float dot = 0.f;
#pragma unroll 4
      for (int c = 0; c < D; c += 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(kr + c);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(h[e]);
          dot += q_s[warp][c + 2 * e] * f.x + q_s[warp][c + 2 * e + 1] * f.y;
        }
      }
      s = dot;
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float alpha = exp2f(m - m_new);
    const float p = j < hi ? exp2f(s - m_new) : 0.f;
    l = l * alpha + warp_sum(p);
#pragma unroll
    for (int t = 0; t < 2 * P; ++t) acc[t] *= alpha;
    const int n = min(32, hi - base);
    for (int jj = 0; jj < n; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const __nv_bfloat16* vr = v + (long long)(base + jj) * a.v_row_stride;
#pragma unroll
      for (int t = 0; t < P; ++t) {
        const float2 f =
            __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vr + 2 * lane + 64 * t));
        acc[2 * t] += pj * f.x;
        acc[2 * t + 1] += pj * f.y;
      }
    }
    m = m_new;
  }
  const long long r = ((long long)batch * a.heads_q + head) * a.seqlen_q + row;
  float* po = part_o + (r * splits + split) * D;
#pragma unroll
  for (int t = 0; t < P; ++t)
    *reinterpret_cast<float2*>(po + 2 * lane + 64 * t) = make_float2(acc[2 * t], acc[2 * t + 1]);
  if (lane == 0) part_ml[r * splits + split] = make_float2(m, l);
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32) combine(SocraticAttentionArgs a, int splits,
                                                       const float* part_o,
                                                       const float2* part_ml) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= a.seqlen_q) return;
  const long long r = ((long long)batch * a.heads_q + head) * a.seqlen_q + row;
  float big = -INFINITY;
  for (int s = 0; s < splits; ++s) big = fmaxf(big, part_ml[r * splits + s].x);
  constexpr int P = D / 64;
  float acc[2 * P];
#pragma unroll
  for (int t = 0; t < 2 * P; ++t) acc[t] = 0.f;
  float total = 0.f;
  if (big != -INFINITY) {
    for (int s = 0; s < splits; ++s) {
      const float2 ml = part_ml[r * splits + s];
      if (ml.x == -INFINITY) continue;  // a chunk that saw no key
      const float w = exp2f(ml.x - big);
      total += ml.y * w;
      const float* po = part_o + (r * splits + s) * D;
#pragma unroll
      for (int t = 0; t < P; ++t) {
        const float2 f = *reinterpret_cast<const float2*>(po + 2 * lane + 64 * t);
        acc[2 * t] += f.x * w;
        acc[2 * t + 1] += f.y * w;
      }
    }
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  __nv_bfloat16* o = static_cast<__nv_bfloat16*>(a.o) + batch * a.o_batch_stride +
                     row * a.o_row_stride + head * a.o_head_stride;
#pragma unroll
  for (int t = 0; t < P; ++t)
    *reinterpret_cast<__nv_bfloat162*>(o + 2 * lane + 64 * t) =
        __floats2bfloat162_rn(acc[2 * t] * inv, acc[2 * t + 1] * inv);
}

template <int D>
int launch(const SocraticAttentionArgs* a, cudaStream_t stream) {
  const int splits = splits_for(a);
  float* part_o = static_cast<float*>(a->workspace);
  float2* part_ml = reinterpret_cast<float2*>(part_o + rows_of(a) * splits * D);
  const int row_blocks = (a->seqlen_q + kWarps - 1) / kWarps;
  partials<D><<<dim3(row_blocks, a->heads_q, a->batch * splits), kWarps * 32, 0, stream>>>(
      *a, splits, part_o, part_ml);
  combine<D><<<dim3(row_blocks, a->heads_q, a->batch), kWarps * 32, 0, stream>>>(
      *a, splits, part_o, part_ml);
  return cudaGetLastError();
}

bool aligned(const SocraticAttentionArgs* a) {
  // 16-byte K rows for the dot products, 4-byte pairs elsewhere.
  const long long k_strides[] = {a->k_batch_stride, a->k_row_stride, a->k_head_stride};
  for (long long s : k_strides)
    if (s % 8) return false;
  const long long strides[] = {a->q_batch_stride, a->q_row_stride, a->q_head_stride,
                               a->v_batch_stride, a->v_row_stride, a->v_head_stride,
                               a->o_batch_stride, a->o_row_stride, a->o_head_stride};
  for (long long s : strides)
    if (s % 2) return false;
  const unsigned long long k = reinterpret_cast<unsigned long long>(a->k);
  const unsigned long long rest = reinterpret_cast<unsigned long long>(a->q) |
                                  reinterpret_cast<unsigned long long>(a->v) |
                                  reinterpret_cast<unsigned long long>(a->o);
  return k % 16 == 0 && rest % 4 == 0;
}

}  // namespace

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs* a) {
  const unsigned long long entries = (unsigned long long)rows_of(a) * splits_for(a);
  return entries * (a->head_dim + 2) * sizeof(float);
}

extern "C" int socratic_attention_forward(const SocraticAttentionArgs* a, cudaStream_t stream) {
  if (a->batch <= 0 || a->seqlen_q <= 0 || a->seqlen_k <= 0 || a->heads_kv <= 0 ||
      a->heads_q % a->heads_kv != 0)
    return cudaErrorInvalidValue;
  if (a->heads_q > 65535 || (long long)a->batch * splits_for(a) > 65535 || !aligned(a))
    return cudaErrorNotSupported;
  if (a->workspace == nullptr || a->workspace_bytes < socratic_attention_workspace(a))
    return cudaErrorInvalidValue;
  switch (a->head_dim) {
    case 64: return launch<64>(a, stream);
    case 128: return launch<128>(a, stream);
    case 256: return launch<256>(a, stream);
    default: return cudaErrorNotSupported;
  }
}
