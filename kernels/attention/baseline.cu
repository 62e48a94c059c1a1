// The "original kernel" every Socratic campaign starts from (ABI v1).
//
// Simple and readable on purpose, but not a straw man: one CTA per tile of query rows and per
// query head, K and V streamed through shared memory 64 keys at a time, online softmax with
// exp2 and the scale folded into Q, fp32 accumulation, causal tiles past the diagonal skipped.
// All arithmetic runs on CUDA cores (no tensor cores): that is the first thing a campaign
// is expected to change.
//
// Work split inside a CTA (4 warps): each warp owns R query rows. For scores, lane j owns keys
// j and j+32 of the tile and computes full dot products against Q rows held in shared memory
// (broadcast reads). For P.V, lane j owns output columns 2j, 2j+1 (+64 t).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "contract.h"

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockN = 64;  // keys per tile
constexpr int kPad = 4;      // bf16 elements of padding per K/V row: conflict-free 8-byte reads

template <int D, int R>
struct Config {
  static constexpr int kBlockM = kWarps * R;        // query rows per CTA
  static constexpr int kRowStride = D + kPad;       // K/V row stride in shared memory
  static constexpr int kPairs = D / 64;             // bf16 pairs per lane in an output row
  static constexpr size_t kSmem = size_t(kBlockM) * D * sizeof(float)          // Q, fp32
                                + 2 * size_t(kBlockN) * kRowStride * 2          // K, V, bf16
                                + size_t(kWarps) * R * kBlockN * sizeof(float); // P
};

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ void unpack4(uint2 raw, float* out) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
  float2 a = __bfloat1622float2(p[0]);
  float2 b = __bfloat1622float2(p[1]);
  out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <int D, int R>
__global__ void __launch_bounds__(kThreads) attention_forward_baseline(SocraticAttentionArgs a) {
  using Cfg = Config<D, R>;
  constexpr int BM = Cfg::kBlockM;
  constexpr int RS = Cfg::kRowStride;
  extern __shared__ __align__(16) unsigned char smem[];
  float* q_s = reinterpret_cast<float*>(smem);                          // [BM][D]
  __nv_bfloat16* k_s = reinterpret_cast<__nv_bfloat16*>(q_s + BM * D);  // [kBlockN][RS]
  __nv_bfloat16* v_s = k_s + kBlockN * RS;                              // [kBlockN][RS]
  float* p_s = reinterpret_cast<float*>(v_s + kBlockN * RS);            // [kWarps][R][kBlockN]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int q0 = blockIdx.x * BM;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / (a.heads_q / a.heads_kv);
  const int sq = a.seqlen_q, sk = a.seqlen_k;
  const int offset = sk - sq;  // bottom-right causal alignment

  const __nv_bfloat16* Q = static_cast<const __nv_bfloat16*>(a.q) +
                           batch * a.q_batch_stride + head * a.q_head_stride;
  const __nv_bfloat16* K = static_cast<const __nv_bfloat16*>(a.k) +
                           batch * a.k_batch_stride + kv_head * a.k_head_stride;
  const __nv_bfloat16* V = static_cast<const __nv_bfloat16*>(a.v) +
                           batch * a.v_batch_stride + kv_head * a.v_head_stride;
  __nv_bfloat16* O = static_cast<__nv_bfloat16*>(a.o) +
                     batch * a.o_batch_stride + head * a.o_head_stride;

  // Q tile to fp32 shared memory, pre-multiplied by scale * log2(e) so that exp2 applies.
  const float qscale = a.softmax_scale * 1.4426950408889634f;
  for (int idx = tid; idx < BM * (D / 8); idx += kThreads) {
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    float vals[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (q0 + r < sq) {
      const uint4 raw = *reinterpret_cast<const uint4*>(Q + (long long)(q0 + r) * a.q_row_stride + c);
      unpack4(make_uint2(raw.x, raw.y), vals);
      unpack4(make_uint2(raw.z, raw.w), vals + 4);
    }
    float4* dst = reinterpret_cast<float4*>(q_s + r * D + c);
    dst[0] = make_float4(vals[0] * qscale, vals[1] * qscale, vals[2] * qscale, vals[3] * qscale);
    dst[1] = make_float4(vals[4] * qscale, vals[5] * qscale, vals[6] * qscale, vals[7] * qscale);
  }

  float m[R], l[R], o[R][2 * Cfg::kPairs];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = neg_inf();
    l[r] = 0.f;
#pragma unroll
    for (int t = 0; t < 2 * Cfg::kPairs; ++t) o[r][t] = 0.f;
  }

  // Keys this CTA can see at all: with a causal mask, none past the last row's diagonal.
  int k_end = sk;
  if (a.causal) {
    const int last_row = min(q0 + BM, sq) - 1;
    k_end = max(0, min(sk, last_row + offset + 1));
  }

  for (int k0 = 0; k0 < k_end; k0 += kBlockN) {
    __syncthreads();  // the previous tile is fully consumed (and Q is loaded on the first pass)
    for (int idx = tid; idx < kBlockN * (D / 8); idx += kThreads) {
      const int j = idx / (D / 8), c = (idx % (D / 8)) * 8;
      uint4 kr = make_uint4(0, 0, 0, 0), vr = make_uint4(0, 0, 0, 0);
      if (k0 + j < sk) {
        kr = *reinterpret_cast<const uint4*>(K + (long long)(k0 + j) * a.k_row_stride + c);
        vr = *reinterpret_cast<const uint4*>(V + (long long)(k0 + j) * a.v_row_stride + c);
      }
      uint2* kd = reinterpret_cast<uint2*>(k_s + j * RS + c);
      uint2* vd = reinterpret_cast<uint2*>(v_s + j * RS + c);
      kd[0] = make_uint2(kr.x, kr.y); kd[1] = make_uint2(kr.z, kr.w);
      vd[0] = make_uint2(vr.x, vr.y); vd[1] = make_uint2(vr.z, vr.w);
    }
    __syncthreads();

    // S = Q K^T for this warp's R rows and the tile's 64 keys (lane owns keys lane, lane+32).
    float s[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r][0] = s[r][1] = 0.f;
#pragma unroll 4
    for (int dd = 0; dd < D; dd += 4) {
      float ka[4], kb[4];
      unpack4(*reinterpret_cast<const uint2*>(k_s + lane * RS + dd), ka);
      unpack4(*reinterpret_cast<const uint2*>(k_s + (lane + 32) * RS + dd), kb);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 qv = *reinterpret_cast<const float4*>(q_s + (warp * R + r) * D + dd);
        s[r][0] += qv.x * ka[0] + qv.y * ka[1] + qv.z * ka[2] + qv.w * ka[3];
        s[r][1] += qv.x * kb[0] + qv.y * kb[1] + qv.z * kb[2] + qv.w * kb[3];
      }
    }

    // Mask, then the online softmax update of each row.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int qi = q0 + warp * R + r;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int kj = k0 + lane + 32 * c;
        const bool visible = kj < sk && (!a.causal || kj <= qi + offset);
        if (!visible) s[r][c] = neg_inf();
      }
      const float m_new = fmaxf(m[r], warp_max(fmaxf(s[r][0], s[r][1])));
      float alpha = 1.f, p0 = 0.f, p1 = 0.f;
      if (m_new != neg_inf()) {  // a row that has seen no key yet keeps zero weight
        alpha = exp2f(m[r] - m_new);
        p0 = exp2f(s[r][0] - m_new);
        p1 = exp2f(s[r][1] - m_new);
      }
      l[r] = l[r] * alpha + warp_sum(p0 + p1);
      m[r] = m_new;
#pragma unroll
      for (int t = 0; t < 2 * Cfg::kPairs; ++t) o[r][t] *= alpha;
      float* prow = p_s + (warp * R + r) * kBlockN;
      prow[lane] = p0;
      prow[lane + 32] = p1;
    }
    __syncwarp();

    // O += P V: P rows read back as broadcasts, V rows as consecutive bf16 pairs.
    const int j_end = min(kBlockN, sk - k0);
    for (int j = 0; j < j_end; j += 4) {
      float vv[4][2 * Cfg::kPairs];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
        for (int t = 0; t < Cfg::kPairs; ++t) {
          const float2 f = __bfloat1622float2(
              *reinterpret_cast<const __nv_bfloat162*>(v_s + (j + jj) * RS + 2 * lane + 64 * t));
          vv[jj][2 * t] = f.x;
          vv[jj][2 * t + 1] = f.y;
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 p4 = *reinterpret_cast<const float4*>(p_s + (warp * R + r) * kBlockN + j);
#pragma unroll
        for (int t = 0; t < 2 * Cfg::kPairs; ++t)
          o[r][t] += p4.x * vv[0][t] + p4.y * vv[1][t] + p4.z * vv[2][t] + p4.w * vv[3][t];
      }
    }
    __syncwarp();
  }

  // Normalize and store. A row that saw no key (only possible with custom shapes) writes 0.
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int qi = q0 + warp * R + r;
    if (qi >= sq) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    __nv_bfloat16* orow = O + (long long)qi * a.o_row_stride;
#pragma unroll
    for (int t = 0; t < Cfg::kPairs; ++t) {
      *reinterpret_cast<__nv_bfloat162*>(orow + 2 * lane + 64 * t) =
          __floats2bfloat162_rn(o[r][2 * t] * inv, o[r][2 * t + 1] * inv);
    }
  }
}

template <int D, int R>
int launch(const SocraticAttentionArgs* a, cudaStream_t stream) {
  using Cfg = Config<D, R>;
  cudaError_t err = cudaFuncSetAttribute(attention_forward_baseline<D, R>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(Cfg::kSmem));
  if (err != cudaSuccess) return err;
  const dim3 grid((a->seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, a->heads_q, a->batch);
  attention_forward_baseline<D, R><<<grid, kThreads, Cfg::kSmem, stream>>>(*a);
  return cudaGetLastError();
}

bool aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15) == 0; }

}  // namespace

extern "C" int socratic_attention_forward(const SocraticAttentionArgs* a, cudaStream_t stream) {
  if (a->batch <= 0 || a->seqlen_q <= 0 || a->seqlen_k <= 0 || a->heads_q <= 0 ||
      a->heads_kv <= 0 || a->heads_q % a->heads_kv != 0)
    return cudaErrorInvalidValue;
  if (a->heads_q > 65535 || a->batch > 65535) return cudaErrorNotSupported;
  // 16-byte vector loads need aligned rows: pointers and row/head/batch strides in 8-element units.
  const long long strides[] = {a->q_batch_stride, a->q_row_stride, a->q_head_stride,
                               a->k_batch_stride, a->k_row_stride, a->k_head_stride,
                               a->v_batch_stride, a->v_row_stride, a->v_head_stride,
                               a->o_batch_stride, a->o_row_stride, a->o_head_stride};
  for (long long s : strides)
    if (s % 8 != 0) return cudaErrorNotSupported;
  if (!aligned16(a->q) || !aligned16(a->k) || !aligned16(a->v) || !aligned16(a->o))
    return cudaErrorNotSupported;
  switch (a->head_dim) {
    case 64: return launch<64, 16>(a, stream);
    case 128: return launch<128, 16>(a, stream);
    case 256: return launch<256, 8>(a, stream);
    default: return cudaErrorNotSupported;
  }
}

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs*) {
  return 0;
}
