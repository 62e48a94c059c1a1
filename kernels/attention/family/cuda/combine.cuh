// Split-KV combine (split_combine): the kernels that merge a split call's fp32 partial outputs and
// (max, sum) pairs into O, splits always merged in a fixed order (deterministic), and the launch
// that picks one by the call's row count.

// The most splits a call is cut into (both planners cap their split count at it).
constexpr int kMaxSplits = 128;
enum CombineKind { kCombineSerial = 0, kCombineParallel = 1, kCombineWide = 2, kCombineBurst = 3 };

// One warp per output row. serial: the splits' (max, sum) pairs read one after another, each
// split's loads behind its pair; parallel (wide, burst): the pairs read by all 32 lanes at once
// (lane s takes splits s, s + 32, ...), each split's weight kept in shared memory, and only then the
// partial outputs accumulated, whose loads no longer wait on a pair loaded in the same iteration.
template <int D>
__global__ void __launch_bounds__(128) attn_combine(const SocraticAttentionArgs a, const Sched sc) {
  if constexpr (kCombinePdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the partials are in
  const long long rows = (long long)a.batch * a.heads_q * a.seqlen_q;
  const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int qi = int(row % a.seqlen_q);
  const long long bh = row / a.seqlen_q;
  const int hq = int(bh % a.heads_q);
  const int b = int(bh / a.heads_q);
  constexpr int P = D / 64;  // float2 pairs per lane
  float2 acc[P];
  float lsum;
  if constexpr (kSplitCombine == kCombineSerial) {
    float mmax = neg_inf();
    for (int s = 0; s < sc.splits; ++s) mmax = fmaxf(mmax, sc.ws_ml[s * rows + row].x);
#pragma unroll
    for (int i = 0; i < P; ++i) acc[i] = make_float2(0.f, 0.f);
    lsum = 0.f;
    if (mmax != neg_inf()) {
      for (int s = 0; s < sc.splits; ++s) {
        const float2 ml = sc.ws_ml[s * rows + row];
        if (ml.x == neg_inf()) continue;
        const float w = fast_exp2(ml.x - mmax);
        lsum += w * ml.y;
        const float2* src = reinterpret_cast<const float2*>(sc.ws_o) + (s * rows + row) * (D / 2);
#pragma unroll
        for (int i = 0; i < P; ++i) {
          const float2 v = src[lane + 32 * i];
          acc[i].x += w * v.x;
          acc[i].y += w * v.y;
        }
      }
    }
  } else {
    __shared__ float weight[4][kMaxSplits];  // this warp's row: each split's weight
    float* wt = weight[threadIdx.x >> 5];
    float mmax = neg_inf();
    for (int s = lane; s < sc.splits; s += 32) mmax = fmaxf(mmax, sc.ws_ml[s * rows + row].x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
    lsum = 0.f;
    for (int s = lane; s < sc.splits; s += 32) {
      const float2 ml = sc.ws_ml[s * rows + row];
      const float w = (ml.x == neg_inf() || mmax == neg_inf()) ? 0.f : fast_exp2(ml.x - mmax);
      wt[s] = w;
      lsum += w * ml.y;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < P; ++i) acc[i] = make_float2(0.f, 0.f);
#pragma unroll 4
    for (int s = 0; s < sc.splits; ++s) {
      const float w = wt[s];
      if (w == 0.f) continue;  // a split that saw no key of this row
      const float2* src = reinterpret_cast<const float2*>(sc.ws_o) + (s * rows + row) * (D / 2);
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const float2 v = src[lane + 32 * i];
        acc[i].x += w * v.x;
        acc[i].y += w * v.y;
      }
    }
  }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
  __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + b * a.o_batch_stride + hq * a.o_head_stride +
                        (long long)qi * a.o_row_stride;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    *reinterpret_cast<__nv_bfloat162*>(orow + 2 * (lane + 32 * i)) =
        __floats2bfloat162_rn(acc[i].x * inv, acc[i].y * inv);
  }
}

// split_combine=wide: a CTA of four warps per output row, for calls with few output rows (under two
// per SM; at decode batch 1, llama3-70b-tp8's 8 rows of 128 splits left the GPU nearly idle with one
// warp per row): the CTA's threads read the pairs together, warp w accumulates splits w, w + 4, ...,
// and the four partial outputs add up in shared memory in a fixed order.
template <int D>
__global__ void __launch_bounds__(128) attn_combine_wide(const SocraticAttentionArgs a, const Sched sc) {
  if constexpr (kCombinePdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the partials are in
  __shared__ float weight[kMaxSplits];  // each split's weight
  __shared__ float red[4];              // the warps' max, then their sums
  __shared__ float2 part[3][D / 2];     // warps 1..3's partial outputs
  const long long rows = (long long)a.batch * a.heads_q * a.seqlen_q;
  const long long row = blockIdx.x;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int qi = int(row % a.seqlen_q);
  const long long bh = row / a.seqlen_q;
  const int hq = int(bh % a.heads_q);
  const int b = int(bh / a.heads_q);
  float mmax = neg_inf();
  for (int s = t; s < sc.splits; s += 128) mmax = fmaxf(mmax, sc.ws_ml[s * rows + row].x);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
  if (lane == 0) red[warp] = mmax;
  __syncthreads();
  mmax = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  __syncthreads();  // red holds the sums next
  float lsum = 0.f;
  for (int s = t; s < sc.splits; s += 128) {
    const float2 ml = sc.ws_ml[s * rows + row];
    const float w = (ml.x == neg_inf() || mmax == neg_inf()) ? 0.f : fast_exp2(ml.x - mmax);
    weight[s] = w;
    lsum += w * ml.y;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
  if (lane == 0) red[warp] = lsum;
  __syncthreads();  // the weights and the sums are in
  lsum = (red[0] + red[1]) + (red[2] + red[3]);
  constexpr int P = D / 64;  // float2 pairs per lane
  float2 acc[P];
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = make_float2(0.f, 0.f);
#pragma unroll 4
  for (int s = warp; s < sc.splits; s += 4) {
    const float w = weight[s];
    if (w == 0.f) continue;  // a split that saw no key of this row
    const float2* src = reinterpret_cast<const float2*>(sc.ws_o) + (s * rows + row) * (D / 2);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float2 v = src[lane + 32 * i];
      acc[i].x += w * v.x;
      acc[i].y += w * v.y;
    }
  }
  if (warp > 0) {
#pragma unroll
    for (int i = 0; i < P; ++i) part[warp - 1][lane + 32 * i] = acc[i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int w = 0; w < 3; ++w)
#pragma unroll
    for (int i = 0; i < P; ++i) {
      acc[i].x += part[w][lane + 32 * i].x;
      acc[i].y += part[w][lane + 32 * i].y;
    }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
  __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + b * a.o_batch_stride + hq * a.o_head_stride +
                        (long long)qi * a.o_row_stride;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    *reinterpret_cast<__nv_bfloat162*>(orow + 2 * (lane + 32 * i)) =
        __floats2bfloat162_rn(acc[i].x * inv, acc[i].y * inv);
  }
}

// split_combine=burst: a CTA of sixteen warps per output row, as wide, but every load of a row's
// partials in flight at once. The wide kernel's warps walked up to 32 splits four at a time, waiting
// for eight rounds of loads (at decode batch 1, ~10 us against FA3's ~8 us for its combine;
// scripts/kernel_spans_gpu.py, stop 35). Here
// sixteen warps take up to eight splits each and load all of them (a split past the last reads the
// last one's address) before any is summed; a split's weight selects its terms (a select, not a
// multiply), so a split of weight 0 adds nothing whatever its partial holds.
template <int D>
__global__ void __launch_bounds__(512) attn_combine_burst(const SocraticAttentionArgs a, const Sched sc) {
  constexpr int W = 16, PER = kMaxSplits / W, P = D / 64;  // warps, splits per warp, float2 per lane
  __shared__ float weight[kMaxSplits];  // each split's weight
  __shared__ float red[2][W];           // the warps' max, then their sums
  __shared__ float2 part[W][D / 2];     // each warp's partial output
  const long long rows = (long long)a.batch * a.heads_q * a.seqlen_q;
  const long long row = blockIdx.x;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int ns = sc.splits;
  const int qi = int(row % a.seqlen_q);
  const long long bh = row / a.seqlen_q;
  const int hq = int(bh % a.heads_q);
  const int b = int(bh / a.heads_q);
  // every partial of this warp's splits, requested before anything waits for the pairs
  float2 v[PER][P];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int s = min(warp + W * i, ns - 1);
    const float2* src = reinterpret_cast<const float2*>(sc.ws_o) + (s * rows + row) * (D / 2);
#pragma unroll
    for (int p = 0; p < P; ++p) v[i][p] = src[lane + 32 * p];
  }
  const float2 ml = t < ns ? sc.ws_ml[t * rows + row] : make_float2(neg_inf(), 0.f);
  float mmax = ml.x;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
  if (lane == 0) red[0][warp] = mmax;
  __syncthreads();
  mmax = red[0][0];
#pragma unroll
  for (int w = 1; w < W; ++w) mmax = fmaxf(mmax, red[0][w]);
  const float wt = (ml.x == neg_inf() || mmax == neg_inf()) ? 0.f : fast_exp2(ml.x - mmax);
  if (t < ns) weight[t] = wt;
  float lsum = wt * ml.y;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
  if (lane == 0) red[1][warp] = lsum;
  __syncthreads();  // the weights and the sums are in
  float2 acc[P];
#pragma unroll
  for (int p = 0; p < P; ++p) acc[p] = make_float2(0.f, 0.f);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int s = warp + W * i;
    const float w = s < ns ? weight[s] : 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p) {  // a split without keys (weight 0) adds nothing, NaN poison included
      acc[p].x = w != 0.f ? fmaf(w, v[i][p].x, acc[p].x) : acc[p].x;
      acc[p].y = w != 0.f ? fmaf(w, v[i][p].y, acc[p].y) : acc[p].y;
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p) part[warp][lane + 32 * p] = acc[p];
  __syncthreads();
  if (t >= D / 2) return;
  lsum = red[1][0];
#pragma unroll
  for (int w = 1; w < W; ++w) lsum += red[1][w];
  float2 sum = part[0][t];
#pragma unroll
  for (int w = 1; w < W; ++w) {
    sum.x += part[w][t].x;
    sum.y += part[w][t].y;
  }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
  __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + b * a.o_batch_stride + hq * a.o_head_stride +
                        (long long)qi * a.o_row_stride;
  *reinterpret_cast<__nv_bfloat162*>(orow + 2 * t) = __floats2bfloat162_rn(sum.x * inv, sum.y * inv);
}

// wg_combine_pdl: a combine kernel launched as a programmatic dependent of the kernel before it (the
// attention kernel's CTAs allow it at their start; the combine's CTAs wait for its grid at theirs).
template <typename Kernel>
cudaError_t launch_combine_pdl(Kernel kernel, int grid, const SocraticAttentionArgs* a, const Sched& s,
                               cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(128u);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, *a, s);
}

// The combine behind a split call: with wide or burst, a call of fewer than two rows per SM gets the
// few-rows kernel. kPdl (wg_combine_pdl, the Hopper path): the 128-thread kernels go as programmatic
// dependents. Returns the error of a launch that reports one at once; the caller reads the rest
// from cudaGetLastError.
template <int D, bool kPdl>
cudaError_t launch_combine(const SocraticAttentionArgs* a, const Sched& s, cudaStream_t stream) {
  const long long rows = (long long)a->batch * a->heads_q * a->seqlen_q;
  if constexpr (kSplitCombine == kCombineBurst) {
    if (rows < 2LL * num_sms()) {  // few rows: a CTA of sixteen warps each
      attn_combine_burst<D><<<int(rows), 512, 0, stream>>>(*a, s);
      return cudaSuccess;
    }
  } else if constexpr (kSplitCombine == kCombineWide) {
    if (rows < 2LL * num_sms()) {  // few rows: a CTA of four warps each
      if constexpr (kPdl) {
        return launch_combine_pdl(attn_combine_wide<D>, int(rows), a, s, stream);
      } else {
        attn_combine_wide<D><<<int(rows), 128, 0, stream>>>(*a, s);
        return cudaSuccess;
      }
    }
  }
  if constexpr (kPdl) {
    return launch_combine_pdl(attn_combine<D>, int((rows + 3) / 4), a, s, stream);
  } else {
    attn_combine<D><<<int((rows + 3) / 4), 128, 0, stream>>>(*a, s);
    return cudaSuccess;
  }
}
