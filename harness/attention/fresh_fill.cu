// The harness's own kernels for the timed calls' fresh inputs (harness/attention/fresh_fill.py).
// Never linked with a candidate: built into a library of its own and loaded by the worker.
//
// Every element of a logical [B, S, H, D] bf16 tensor (Q, K or V of one timed call) is a pure
// function of the call's nonce, the tensor's kind (q, k, v), the distribution and the element's
// place: a counter-based generator. So the check after the calls regenerates only the rows it
// reads (a few query rows, a few (batch, kv head) blocks of K and V), where a sequential
// generator had to make all of Q, K and V again. Two adjacent elements (d even, d + 1) share
// one 64-bit hash of their pair's counter: two normals by Box-Muller, or two uniforms.
//
// fresh_fill.py's `values` is the same function in torch operations (the CPU backend's, and the
// specification the GPU test compares this file with).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// A named namespace: the profiler's cross-check tells the harness's kernels from the candidate's by
// name (harness/device.py: kernel_activity), as it does torch's own at::native ones.
namespace socratic_harness {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z;
}

__host__ __device__ __forceinline__ uint64_t stream_key(uint64_t nonce, int kind) {
  return mix64(nonce ^ ((uint64_t)(kind + 1) * kGolden));
}

// The two values of pair `pair` (elements 2 pair and 2 pair + 1 of the tensor's flat logical
// order). Not inlined: every kernel below calls the one compiled body, so a value regenerated
// by the row kernel has the bits the fill kernel wrote.
__device__ __noinline__ float2 pair_values(uint64_t key, uint64_t pair, int kind, int dist) {
  const uint64_t h = mix64(key + pair * kGolden);
  const float a = (float)(uint32_t)(h >> 40);             // 24 bits
  const float b = (float)((uint32_t)(h >> 16) & 0xFFFFFFu);  // 24 bits
  const float inv = 5.9604644775390625e-08f;              // 2^-24
  float x, y;
  if (dist == 2) {  // uniform-shifted: [0, 2) for v, [-0.75, 1.25) for q and k
    x = __fmul_rn(a, inv);
    y = __fmul_rn(b, inv);
    x = __fmul_rn(x, 2.0f);
    y = __fmul_rn(y, 2.0f);
    if (kind != 2) {
      x = __fsub_rn(x, 0.75f);
      y = __fsub_rn(y, 0.75f);
    }
  } else {  // normal (0) and large-logits (1): Box-Muller
    const float u1 = __fmul_rn(__fadd_rn(a, 0.5f), inv);  // (0, 1)
    const float u2 = __fmul_rn(b, inv);                   // [0, 1)
    const float r = sqrtf(__fmul_rn(-2.0f, logf(u1)));
    float s, c;
    sincospif(__fmul_rn(2.0f, u2), &s, &c);
    x = __fmul_rn(r, c);
    y = __fmul_rn(r, s);
    if (kind == 2) {
      x = __fadd_rn(x, 0.5f);
      y = __fadd_rn(y, 0.5f);
    } else if (dist == 1) {  // logits with std ~16: a kernel without max subtraction overflows
      x = __fmul_rn(x, 4.0f);
      y = __fmul_rn(y, 4.0f);
    }
  }
  return make_float2(x, y);
}

__device__ __forceinline__ void store_pair(__nv_bfloat16* p, float2 v) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v.x, v.y);
}

// One warp a row (b, s, h) of D elements, rows strided over the grid.
__global__ void fill_kernel(__nv_bfloat16* dst, long long B, long long S, long long H, long long D,
                            long long sb, long long ss, long long sh, uint64_t key, int kind, int dist) {
  const long long rows = B * S * H;
  const int warps = blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  for (long long row = (long long)blockIdx.x * warps + threadIdx.x / 32; row < rows;
       row += (long long)gridDim.x * warps) {
    const long long h = row % H;
    const long long s = (row / H) % S;
    const long long b = row / (H * S);
    __nv_bfloat16* out = dst + b * sb + s * ss + h * sh;
    const uint64_t first = (uint64_t)row * (uint64_t)(D / 2);
    for (long long p = lane; p < D / 2; p += 32) {
      store_pair(out + 2 * p, pair_values(key, first + (uint64_t)p, kind, dist));
    }
  }
}

// Rows regenerated for the check: descriptor i = (call, b, s, h) names row (b, s, h) of the
// tensor of call `call` (its nonce and distribution from the tables): dst is [count, D]. With
// `blocks` set the descriptor's s is ignored and rows s = 0 .. S - 1 of (b, h) are written one
// after another (a whole (batch, head) block of K or V): dst is [count, S, D]. Contiguous.
__global__ void rows_kernel(__nv_bfloat16* dst, const long long* desc, long long count, int blocks,
                            const unsigned long long* nonces, const int* dists, long long S,
                            long long H, long long D, int kind) {
  const long long span = blocks ? S : 1;
  const long long rows = count * span;
  const int warps = blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  for (long long row = (long long)blockIdx.x * warps + threadIdx.x / 32; row < rows;
       row += (long long)gridDim.x * warps) {
    const long long* d = desc + 4 * (row / span);
    const long long call = d[0], b = d[1], h = d[3];
    const long long s = blocks ? row % span : d[2];
    const uint64_t key = stream_key(nonces[call], kind);
    const uint64_t first = (uint64_t)((b * S + s) * H + h) * (uint64_t)(D / 2);
    __nv_bfloat16* out = dst + row * D;
    for (long long p = lane; p < D / 2; p += 32) {
      store_pair(out + 2 * p, pair_values(key, first + (uint64_t)p, kind, dists[call]));
    }
  }
}

// Rows of the kept outputs: descriptor i = (call, b, s, h) copies row (b, s, h) of the
// contiguous [B, S, H, D] output whose address is sources[call].
__global__ void take_kernel(__nv_bfloat16* dst, const long long* desc, long long count,
                            const unsigned long long* sources, long long S, long long H, long long D) {
  const int warps = blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  for (long long row = (long long)blockIdx.x * warps + threadIdx.x / 32; row < count;
       row += (long long)gridDim.x * warps) {
    const long long* d = desc + 4 * row;
    const __nv_bfloat16* src =
        reinterpret_cast<const __nv_bfloat16*>(sources[d[0]]) + ((d[1] * S + d[2]) * H + d[3]) * D;
    for (long long e = lane; e < D; e += 32) dst[row * D + e] = src[e];
  }
}

constexpr int kThreads = 256;

int blocks_for(long long rows) {
  const long long want = (rows + kThreads / 32 - 1) / (kThreads / 32);
  return (int)(want < 132LL * 32 ? (want > 0 ? want : 1) : 132LL * 32);
}

}  // namespace socratic_harness

using namespace socratic_harness;

extern "C" int socratic_fresh_fill(void* dst, long long B, long long S, long long H, long long D,
                                   long long sb, long long ss, long long sh,
                                   unsigned long long nonce, int kind, int dist, void* stream) {
  if (D % 2 != 0 || B * S * H == 0) return D % 2 != 0 ? (int)cudaErrorInvalidValue : 0;
  fill_kernel<<<blocks_for(B * S * H), kThreads, 0, (cudaStream_t)stream>>>(
      (__nv_bfloat16*)dst, B, S, H, D, sb, ss, sh, stream_key(nonce, kind), kind, dist);
  return (int)cudaGetLastError();
}

extern "C" int socratic_fresh_rows(void* dst, const void* desc, long long count, int blocks,
                                   const void* nonces, const void* dists, long long S, long long H,
                                   long long D, int kind, void* stream) {
  if (D % 2 != 0 || S < 1) return (int)cudaErrorInvalidValue;
  if (count == 0) return 0;
  rows_kernel<<<blocks_for(count * (blocks ? S : 1)), kThreads, 0, (cudaStream_t)stream>>>(
      (__nv_bfloat16*)dst, (const long long*)desc, count, blocks, (const unsigned long long*)nonces,
      (const int*)dists, S, H, D, kind);
  return (int)cudaGetLastError();
}

extern "C" int socratic_take_rows(void* dst, const void* desc, long long count, const void* sources,
                                  long long S, long long H, long long D, void* stream) {
  if (count == 0) return 0;
  take_kernel<<<blocks_for(count), kThreads, 0, (cudaStream_t)stream>>>(
      (__nv_bfloat16*)dst, (const long long*)desc, count, (const unsigned long long*)sources, S, H, D);
  return (int)cudaGetLastError();
}
