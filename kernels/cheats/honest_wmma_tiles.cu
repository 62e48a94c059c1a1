// honest: tensor-core tiles through WMMA (ABI v1).
//
// Style: a CTA of 4 warps takes 64 query rows of one head; each warp owns 16 of them. Per tile
// of 64 keys: K and V go to shared memory; S = Q K^T and O += P V run on the tensor cores as
// 16x16x16 bf16 WMMA products with fp32 accumulators; the online softmax reads S from shared
// memory (fp32), keeps the row max and sum in fp32 and writes P in bf16, as FlashAttention
// does. The running output lives in shared memory (fp32), rescaled per row before each P V.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "contract.h"

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockM = 64;  // query rows per CTA, 16 per warp
constexpr int kBlockN = 64;  // keys per tile

constexpr size_t align128(size_t x) { return (x + 127) / 128 * 128; }

template <int D>
struct Layout {
  static constexpr int kLdKV = D + 8;       // bf16 per K/V/Q row in shared memory
  static constexpr int kLdS = kBlockN + 4;  // fp32 per score row
  static constexpr int kLdP = kBlockN + 8;  // bf16 per probability row
  static constexpr int kLdO = D + 4;        // fp32 per output row
  static constexpr size_t kK = 0;
  static constexpr size_t kV = align128(kK + size_t(kBlockN) * kLdKV * 2);
  static constexpr size_t kQ = align128(kV + size_t(kBlockN) * kLdKV * 2);
  static constexpr size_t kS = align128(kQ + size_t(kBlockM) * kLdKV * 2);
  static constexpr size_t kP = align128(kS + size_t(kBlockM) * kLdS * 4);
  static constexpr size_t kO = align128(kP + size_t(kBlockM) * kLdP * 2);
  static constexpr size_t kRow = align128(kO + size_t(kBlockM) * kLdO * 4);
  static constexpr size_t kBytes = align128(kRow + size_t(kBlockM) * 4);
};

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

// rows x D bf16 from global (row stride in elements) to shared memory; rows past `valid` are 0.
template <int D>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, long long stride, int rows,
                                          int valid) {
  for (int idx = threadIdx.x; idx < rows * (D / 8); idx += kThreads) {
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (r < valid) raw = *reinterpret_cast<const uint4*>(src + (long long)r * stride + c);
    *reinterpret_cast<uint4*>(dst + r * Layout<D>::kLdKV + c) = raw;
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) attention_wmma(SocraticAttentionArgs a) {
  using L = Layout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* k_s = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* v_s = reinterpret_cast<bf16*>(smem + L::kV);
  bf16* q_s = reinterpret_cast<bf16*>(smem + L::kQ);
  float* s_s = reinterpret_cast<float*>(smem + L::kS);
  bf16* p_s = reinterpret_cast<bf16*>(smem + L::kP);
  float* o_s = reinterpret_cast<float*>(smem + L::kO);
  float* row_s = reinterpret_cast<float*>(smem + L::kRow);  // per-row alpha, then 1/sum

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kBlockM;
  const int head = blockIdx.y, batch = blockIdx.z;
  const int kv_head = head / (a.heads_q / a.heads_kv);
  const int sq = a.seqlen_q, sk = a.seqlen_k, offset = sk - sq;
  const bf16* Q = static_cast<const bf16*>(a.q) + batch * a.q_batch_stride + head * a.q_head_stride;
  const bf16* K = static_cast<const bf16*>(a.k) + batch * a.k_batch_stride + kv_head * a.k_head_stride;
  const bf16* V = static_cast<const bf16*>(a.v) + batch * a.v_batch_stride + kv_head * a.v_head_stride;
  bf16* O = static_cast<bf16*>(a.o) + batch * a.o_batch_stride + head * a.o_head_stride;

  load_tile<D>(q_s, Q + (long long)q0 * a.q_row_stride, a.q_row_stride, kBlockM, sq - q0);
  for (int idx = threadIdx.x; idx < kBlockM * D; idx += kThreads)
    o_s[(idx / D) * L::kLdO + idx % D] = 0.f;
  __syncthreads();  // Q and O are shared by the warps (even when no key tile follows)

  const float scale = a.softmax_scale * 1.4426950408889634f;
  float m[16], l[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
  }
  int k_end = sk;
  if (a.causal) k_end = max(0, min(sk, min(q0 + kBlockM, sq) - 1 + offset + 1));

  const bf16* qw = q_s + warp * 16 * L::kLdKV;
  float* sw = s_s + warp * 16 * L::kLdS;
  bf16* pw = p_s + warp * 16 * L::kLdP;
  float* ow = o_s + warp * 16 * L::kLdO;
  float* rw = row_s + warp * 16;

  for (int k0 = 0; k0 < k_end; k0 += kBlockN) {
    __syncthreads();  // every warp is done with the previous tile
    load_tile<D>(k_s, K + (long long)k0 * a.k_row_stride, a.k_row_stride, kBlockN, sk - k0);
    load_tile<D>(v_s, V + (long long)k0 * a.v_row_stride, a.v_row_stride, kBlockN, sk - k0);
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
#pragma unroll
    for (int n = 0; n < kBlockN / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll 4
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, qw + kk * 16, L::kLdKV);
        wmma::load_matrix_sync(fb, k_s + n * 16 * L::kLdKV + kk * 16, L::kLdKV);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(sw + n * 16, acc, L::kLdS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: lane owns keys lane and lane + 32 of each row.
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int qi = q0 + warp * 16 + r;
      float s0 = sw[r * L::kLdS + lane] * scale;
      float s1 = sw[r * L::kLdS + lane + 32] * scale;
      const int kj0 = k0 + lane, kj1 = k0 + lane + 32;
      if (kj0 >= sk || (a.causal && kj0 > qi + offset)) s0 = -INFINITY;
      if (kj1 >= sk || (a.causal && kj1 > qi + offset)) s1 = -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(fmaxf(s0, s1)));
      float alpha = 1.f, p0 = 0.f, p1 = 0.f;
      if (m_new != -INFINITY) {
        alpha = exp2f(m[r] - m_new);
        p0 = exp2f(s0 - m_new);
        p1 = exp2f(s1 - m_new);
      }
      l[r] = l[r] * alpha + warp_sum(p0 + p1);
      m[r] = m_new;
      pw[r * L::kLdP + lane] = __float2bfloat16(p0);
      pw[r * L::kLdP + lane + 32] = __float2bfloat16(p1);
      if (lane == 0) rw[r] = alpha;
    }
    __syncwarp();
    for (int idx = lane; idx < 16 * D; idx += 32) ow[(idx / D) * L::kLdO + idx % D] *= rw[idx / D];
    __syncwarp();

    // O += P V.
#pragma unroll 2
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, ow + n * 16, L::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, pw + kk * 16, L::kLdP);
        wmma::load_matrix_sync(fb, v_s + kk * 16 * L::kLdKV + n * 16, L::kLdKV);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(ow + n * 16, acc, L::kLdO, wmma::mem_row_major);
    }
    __syncwarp();
  }

  // Normalize and store; a row that saw no key writes zeros.
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < 16; ++r) rw[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
  }
  __syncwarp();
  for (int idx = lane; idx < 16 * (D / 2); idx += 32) {
    const int r = idx / (D / 2), c = (idx % (D / 2)) * 2;
    const int qi = q0 + warp * 16 + r;
    if (qi >= sq) continue;
    const float inv = rw[r];
    *reinterpret_cast<__nv_bfloat162*>(O + (long long)qi * a.o_row_stride + c) =
        __floats2bfloat162_rn(ow[r * L::kLdO + c] * inv, ow[r * L::kLdO + c + 1] * inv);
  }
}

template <int D>
int launch(const SocraticAttentionArgs* a, cudaStream_t stream) {
  const size_t bytes = Layout<D>::kBytes;
  cudaError_t err = cudaFuncSetAttribute(attention_wmma<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes));
  if (err != cudaSuccess) return err;
  const dim3 grid((a->seqlen_q + kBlockM - 1) / kBlockM, a->heads_q, a->batch);
  attention_wmma<D><<<grid, kThreads, bytes, stream>>>(*a);
  return cudaGetLastError();
}

bool aligned(const SocraticAttentionArgs* a) {
  const long long in_strides[] = {a->q_batch_stride, a->q_row_stride, a->q_head_stride,
                                  a->k_batch_stride, a->k_row_stride, a->k_head_stride,
                                  a->v_batch_stride, a->v_row_stride, a->v_head_stride};
  for (long long s : in_strides)
    if (s % 8) return false;
  const long long out_strides[] = {a->o_batch_stride, a->o_row_stride, a->o_head_stride};
  for (long long s : out_strides)
    if (s % 2) return false;
  const unsigned long long in = reinterpret_cast<unsigned long long>(a->q) |
                                reinterpret_cast<unsigned long long>(a->k) |
                                reinterpret_cast<unsigned long long>(a->v);
  return in % 16 == 0 && reinterpret_cast<unsigned long long>(a->o) % 4 == 0;
}

}  // namespace

extern "C" int socratic_attention_forward(const SocraticAttentionArgs* a, cudaStream_t stream) {
  if (a->batch <= 0 || a->seqlen_q <= 0 || a->seqlen_k <= 0 || a->heads_kv <= 0 ||
      a->heads_q % a->heads_kv != 0)
    return cudaErrorInvalidValue;
  if (a->heads_q > 65535 || a->batch > 65535 || !aligned(a)) return cudaErrorNotSupported;
  switch (a->head_dim) {
    case 64: return launch<64>(a, stream);
    case 128: return launch<128>(a, stream);
    case 256: return launch<256>(a, stream);
    default: return cudaErrorNotSupported;
  }
}

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs*) {
  return 0;
}
