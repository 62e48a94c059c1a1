// Socratic attention-forward family kernel (ABI v1), rendered by kernels/attention/family.
// FlashAttention-2 style: tensor cores through mma.sync m16n8k16 (bf16 in, fp32 accumulate),
// operands from shared memory through ldmatrix, K/V streamed by a multi-stage pipeline,
// online softmax in registers. One file supports head_dim 64, 128 and 256, GQA/MQA,
// bottom-right causal masks, ragged sizes, arbitrary strides (multiples of 8 elements),
// packing of a GQA group's query heads into one tile, and split-KV with a combine kernel.
//
// Knob setting:
//   {
//    "tile_d64": "128x64x4",
//    "tile_d128": "128x32x4",
//    "tile_d256": "128x64x8",
//    "decode_tile": "16x64x1",
//    "loader": "cp_async",
//    "stages": 2,
//    "smem_layout": "swizzle",
//    "q_fragments": "smem",
//    "softmax_exp": "exp2_folded",
//    "rescale": "always",
//    "grid_order": "heavy_first",
//    "persistent": true,
//    "split_kv": "1wave",
//    "pack_gqa": "decode",
//    "causal_skip": true,
//    "mask_split": true,
//    "mma": "wgmma",
//    "wg_block_n_d64": 128,
//    "wg_block_n_d128": 128,
//    "wg_block_n_d256": 64,
//    "wg_consumers": 2,
//    "wg_stages": 2,
//    "wg_overlap": true,
//    "wg_pingpong": true
//   }
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "contract.h"

namespace fam {

// ---------------------------------------------------------------------------------------
// Knobs (rendered). Unused paths are removed at compile time by `if constexpr`.
// ---------------------------------------------------------------------------------------
constexpr bool kBulk = false;  // loader=cp_async
constexpr int kStages = 2;
constexpr bool kSwizzle = true;  // smem_layout=swizzle
constexpr bool kQInRegs = false;  // q_fragments=smem
constexpr bool kExp2 = true;  // softmax_exp=exp2_folded
constexpr bool kLazyRescale = false;  // rescale=always
constexpr int kGridOrder = 2;  // grid_order=heavy_first
constexpr bool kPersistent = true;
constexpr int kSplitWaves = 1;  // split_kv=1wave
constexpr int kPackGqa = 1;  // pack_gqa=decode
constexpr bool kCausalSkip = true;
constexpr bool kMaskSplit = true;
constexpr int kDecodeKvWarps = 1;  // decode_kv_warps
constexpr bool kDecodeTile = true;  // decode_tile=16x64x1
constexpr int kSplitCombine = 0;  // split_combine=serial
constexpr bool kCombinePdl = false;  // wg_combine_pdl
// the Hopper scheduling knobs that shape Sched (0 / false with mma=mma_sync)
constexpr int kWgL2Sections = 0;  // wg_l2_sections (MB of L2 a section; 0: none)
constexpr bool kWgDynamic = false;  // wg_scheduler=static

template <int D, bool Dec>
struct TileOf;
template <>
struct TileOf<64, false> {
  static constexpr int BM = 128, BN = 64, W = 4;
};
template <>
struct TileOf<64, true> {
  static constexpr int BM = 16, BN = 64, W = 1;
};
template <>
struct TileOf<128, false> {
  static constexpr int BM = 128, BN = 32, W = 4;
};
template <>
struct TileOf<128, true> {
  static constexpr int BM = 16, BN = 64, W = 1;
};
template <>
struct TileOf<256, false> {
  static constexpr int BM = 128, BN = 64, W = 8;
};
template <>
struct TileOf<256, true> {
  static constexpr int BM = 16, BN = 64, W = 1;
};

// Dec: the small tile used when a head group has few query rows (decode).
template <int D, bool Dec>
struct Cfg {
  static constexpr int BM = TileOf<D, Dec>::BM;  // query rows per tile
  static constexpr int BN = TileOf<D, Dec>::BN;  // keys per tile
  static constexpr int KW = Dec ? kDecodeKvWarps : 1;  // key warps: each takes a slice of every block
  static constexpr int WR = TileOf<D, Dec>::W;   // row warps
  static constexpr int W = WR * KW;              // warps
  static constexpr int BNW = BN / KW;            // keys per key warp per block
  static constexpr int kThreads = W * 32;
  static constexpr int RPW = BM / WR;           // query rows per warp
  static constexpr int MT = RPW / 16;           // m16 tiles per warp
  static constexpr int NT = BNW / 8;            // n8 tiles of S per row block
  static constexpr int DT = D / 8;              // n8 tiles of O per row block
  static constexpr int KD = D / 16;             // k16 steps of Q K^T
  static constexpr int KN = BNW / 16;           // k16 steps of P V
  static constexpr int CH = D / 8;              // 16-byte chunks in a row
  static constexpr int kRow = kSwizzle ? D : D + 8;  // elements per smem row (pad layout)
  static constexpr int kQElems = BM * kRow;
  static constexpr int kKVElems = BN * kRow;
  // the key warps' merge reuses the K/V stages: outputs of warps 1.. (fp32) and every warp's (max, sum)
  static constexpr size_t kMergeBytes = KW > 1 ? size_t(KW - 1) * BM * D * 4 + size_t(KW) * BM * 8 : 0;
  static constexpr size_t kLoadBytes = size_t(2 * kStages * kKVElems) * 2;
  static constexpr size_t kTileBytes =
      size_t(kQElems) * 2 + (kMergeBytes > kLoadBytes ? kMergeBytes : kLoadBytes);
  static constexpr size_t kSmem = kTileBytes + (kBulk ? 8 * kStages : 0);
  static_assert(RPW == 16 || RPW == 32, "rows per warp must be 16 or 32");
  static_assert(BNW % 16 == 0, "keys per key warp must be a multiple of 16");
};

// Element offset of 16-byte chunk `ch` of row `row` in a tile of ROWS rows.
// swizzle: 64-column panels, chunk index XOR (row % 8) inside each 128-byte panel row
// (the pattern of the copy engine's 128B swizzle); pad: rows of D + 8 elements.
template <int D, int ROWS>
__device__ __forceinline__ int soff(int row, int ch) {
  if constexpr (kSwizzle) {
    return (ch >> 3) * (ROWS * 64) + row * 64 + (((ch & 7) ^ (row & 7)) << 3);
  } else {
    return row * (D + 8) + ch * 8;
  }
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;  // src-size 0: the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Launch-time schedule, computed on the host (see plan()), which the kernels take by value. The
// Hopper scheduling knobs' fields sit after `tiles` only where the setting has them (elsewhere the
// name is a constant that nothing reads), so a setting's kernels take only its own parameters. Each
// form is written out whole: a base class holding the common fields renumbers the PTX's registers.
template <bool kL2Units, bool kTileCounter>
struct SchedOf {
  int gp;          // query heads packed per tile row group (1: no GQA packing)
  int mtotal;      // packed query rows per (batch, head group) = seqlen_q * gp
  int m_blocks;    // tiles along the packed query rows
  int heads_grid;  // heads_kv when packing, else heads_q
  int splits;      // split-KV factor (1: none)
  int tiles;       // m_blocks * heads_grid * batch * splits
  int l2_units;    // wg_l2_sections: units (head, batch, split) per section
  unsigned int* tile_counter;  // wg_scheduler=dynamic: tiles claimed past the first wave (null: round robin)
  float* ws_o;     // split partial outputs, fp32 [splits][batch][heads_q][seqlen_q][D]
  float2* ws_ml;   // split (max in log2 units, sum) [splits][batch][heads_q][seqlen_q]
};
template <>
struct SchedOf<true, false> {
  int gp, mtotal, m_blocks, heads_grid, splits, tiles;
  int l2_units;
  static constexpr unsigned int* tile_counter = nullptr;
  float* ws_o;
  float2* ws_ml;
};
template <>
struct SchedOf<false, true> {
  int gp, mtotal, m_blocks, heads_grid, splits, tiles;
  static constexpr int l2_units = 0;
  unsigned int* tile_counter;
  float* ws_o;
  float2* ws_ml;
};
template <>
struct SchedOf<false, false> {
  int gp, mtotal, m_blocks, heads_grid, splits, tiles;
  static constexpr int l2_units = 0;
  static constexpr unsigned int* tile_counter = nullptr;
  float* ws_o;
  float2* ws_ml;
};
using Sched = SchedOf<(kWgL2Sections > 0), kWgDynamic>;

struct TrueTag {
  static constexpr bool value = true;
};
struct FalseTag {
  static constexpr bool value = false;
};

struct TileId {
  int mb, head, batch, split;
};

__device__ __forceinline__ TileId decode_tile(int t, const Sched& s, int batch) {
  TileId id;
  if constexpr (kGridOrder == 0) {  // m blocks fastest, then splits, heads, batch
    id.mb = t % s.m_blocks; t /= s.m_blocks;
    id.split = t % s.splits; t /= s.splits;
    id.head = t % s.heads_grid; id.batch = t / s.heads_grid;
  } else if constexpr (kGridOrder == 1) {  // heads fastest: a GQA group's tiles run together
    id.head = t % s.heads_grid; t /= s.heads_grid;
    id.split = t % s.splits; t /= s.splits;
    id.mb = t % s.m_blocks; id.batch = t / s.m_blocks;
  } else {  // heavy first: the last (longest under a causal mask) m blocks start first
    id.head = t % s.heads_grid; t /= s.heads_grid;
    id.batch = t % batch; t /= batch;
    id.split = t % s.splits; t /= s.splits;
    id.mb = s.m_blocks - 1 - t;
  }
  return id;
}

template <int D, bool Dec>
__global__ void __launch_bounds__(Cfg<D, Dec>::kThreads, 1) attn_fwd(const SocraticAttentionArgs a, const Sched sc) {
  using C = Cfg<D, Dec>;
  constexpr int BM = C::BM, BN = C::BN, MT = C::MT, NT = C::NT, DT = C::DT, CH = C::CH;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* k_s = q_s + C::kQElems;
  __nv_bfloat16* v_s = k_s + kStages * C::kKVElems;
  const uint32_t bar0 = smem_u32(smem_raw + C::kTileBytes);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // row warp, key warp (decode_kv_warps > 1: key warp kw takes keys [kw * BNW, (kw + 1) * BNW) of
  // each block; a file without key warps takes the warp as its row warp)
  const int rw = kDecodeKvWarps > 1 ? warp % C::WR : warp, kw = kDecodeKvWarps > 1 ? warp / C::WR : 0;
  const int g = lane >> 2, t4 = lane & 3;
  const int sq = a.seqlen_q, sk = a.seqlen_k;
  const int offset = sk - sq;
  const int group = a.heads_q / a.heads_kv;
  const float scale = a.softmax_scale;
  const float sl2 = scale * 1.4426950408889634f;

  if constexpr (kBulk) {
    if (tid == 0) {
      for (int s = 0; s < kStages; ++s) mbar_init(bar0 + 8 * s, 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
  }
  uint32_t seq_base = 0;  // K/V tiles loaded by this CTA so far (mbarrier phases)

  const int step = kPersistent ? gridDim.x : sc.tiles;
  for (int tile = blockIdx.x; tile < sc.tiles; tile += step) {
    const TileId id = decode_tile(tile, sc, a.batch);
    const int m0 = id.mb * BM;
    const int kv_head = sc.gp > 1 ? id.head : id.head / group;
    const int hbase = sc.gp > 1 ? id.head * sc.gp : id.head;
    const __nv_bfloat16* Kb = static_cast<const __nv_bfloat16*>(a.k) + id.batch * a.k_batch_stride +
                              kv_head * a.k_head_stride;
    const __nv_bfloat16* Vb = static_cast<const __nv_bfloat16*>(a.v) + id.batch * a.v_batch_stride +
                              kv_head * a.v_head_stride;

    // Key range of this tile (and of its split).
    const int m_last = min(m0 + BM, sc.mtotal) - 1;
    const int qi_first = m0 / sc.gp, qi_last = m_last / sc.gp;
    int kv_hi = sk;
    if (kCausalSkip && a.causal) kv_hi = max(0, min(sk, qi_last + offset + 1));
    const int nblocks = (kv_hi + BN - 1) / BN;
    const int per = (nblocks + sc.splits - 1) / sc.splits;
    const int b_lo = min(nblocks, id.split * per);
    const int b_hi = min(nblocks, b_lo + per);
    const int nb = b_hi - b_lo;
    // Blocks below n_full are visible to every row of the tile (no mask needed).
    const int kmin_tile = a.causal ? min(qi_first + offset, sk - 1) : sk - 1;
    const int n_full = kmin_tile + 1 > 0 ? (kmin_tile + 1) / BN : 0;

    // Per-thread rows: the last key each row may see.
    int kmax[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + rw * C::RPW + mt * 16 + g + 8 * h;
        const int qi = r / sc.gp;
        kmax[mt][h] = (a.causal && r < sc.mtotal) ? min(qi + offset, sk - 1) : sk - 1;
      }

    __syncthreads();  // the previous tile's readers are done with every buffer

    // Q tile: cp.async, zero-filled past the last row.
    for (int idx = tid; idx < BM * CH; idx += C::kThreads) {
      const int row = idx / CH, ch = idx % CH;
      const int r = m0 + row;
      const bool ok = r < sc.mtotal;
      const int qi = ok ? r / sc.gp : 0;
      const int hq = ok ? hbase + r % sc.gp : hbase;
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(a.q) + id.batch * a.q_batch_stride +
                                 hq * a.q_head_stride + (long long)qi * a.q_row_stride + ch * 8;
      cp_async16(smem_u32(q_s + soff<D, BM>(row, ch)), src, ok);
    }
    cp_async_commit();

    auto issue = [&](int jb, int stage) {
      const int n0 = jb * BN;
      __nv_bfloat16* kd = k_s + stage * C::kKVElems;
      __nv_bfloat16* vd = v_s + stage * C::kKVElems;
      if constexpr (kBulk) {
        if (warp == 0) {
          // Order this CTA's earlier generic-proxy reads of the buffer before the copy engine's writes.
          asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
          const int valid = min(BN, sk - n0);
          const uint32_t bar = bar0 + 8 * stage;
          if (lane == 0) mbar_expect_tx(bar, uint32_t(valid) * D * 2 * 2);
          __syncwarp();
          for (int row = lane; row < BN; row += 32) {
            if (row < valid) {
              bulk_g2s(smem_u32(kd + row * (D + 8)), Kb + (long long)(n0 + row) * a.k_row_stride, D * 2, bar);
              bulk_g2s(smem_u32(vd + row * (D + 8)), Vb + (long long)(n0 + row) * a.v_row_stride, D * 2, bar);
            } else {
              for (int ch = 0; ch < CH; ++ch) {
                *reinterpret_cast<uint4*>(kd + row * (D + 8) + ch * 8) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(vd + row * (D + 8) + ch * 8) = make_uint4(0, 0, 0, 0);
              }
            }
          }
        }
      } else {
        for (int idx = tid; idx < BN * CH; idx += C::kThreads) {
          const int row = idx / CH, ch = idx % CH;
          const bool ok = n0 + row < sk;
          const long long key = ok ? n0 + row : 0;
          cp_async16(smem_u32(kd + soff<D, BN>(row, ch)), Kb + key * a.k_row_stride + ch * 8, ok);
          cp_async16(smem_u32(vd + soff<D, BN>(row, ch)), Vb + key * a.v_row_stride + ch * 8, ok);
        }
      }
    };
    auto stage_of = [&](int j) { return int((seq_base + uint32_t(j)) % kStages); };
    auto parity_of = [&](int j) { return ((seq_base + uint32_t(j)) / kStages) & 1u; };

    if constexpr (kStages > 1) {
#pragma unroll
      for (int i = 0; i < kStages - 1; ++i) {
        if (i < nb) issue(b_lo + i, stage_of(i));
        if constexpr (!kBulk) cp_async_commit();
      }
    }
    // Q is the oldest cp.async group: wait for it alone.
    if constexpr (kBulk || kStages == 1) {
      cp_async_wait<0>();
    } else {
      cp_async_wait<kStages - 1>();
    }
    __syncthreads();

    uint32_t qf[kQInRegs ? MT : 1][kQInRegs ? C::KD : 1][4];
    if constexpr (kQInRegs) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < C::KD; ++kk) {
          const int row = rw * C::RPW + mt * 16 + (lane & 15);
          ldsm_x4(smem_u32(q_s + soff<D, BM>(row, kk * 2 + (lane >> 4))), qf[mt][kk][0], qf[mt][kk][1],
                  qf[mt][kk][2], qf[mt][kk][3]);
        }
    }

    float o[MT][DT][4];
    float m_run[MT][2], l_run[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        m_run[mt][h] = neg_inf();
        l_run[mt][h] = 0.f;
      }
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
    }

    // One K/V block: S = Q K^T, mask, online softmax, O += P V.
    auto compute = [&](int jb, int stage, auto masked_tag) {
      constexpr bool kMasked = decltype(masked_tag)::value;
      const __nv_bfloat16* kt = k_s + stage * C::kKVElems;
      const __nv_bfloat16* vt = v_s + stage * C::kKVElems;
      float s[MT][NT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;

#pragma unroll
      for (int kk = 0; kk < C::KD; ++kk) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (kQInRegs) {
#pragma unroll
            for (int e = 0; e < 4; ++e) af[mt][e] = qf[mt][kk][e];
          } else {
            const int row = rw * C::RPW + mt * 16 + (lane & 15);
            ldsm_x4(smem_u32(q_s + soff<D, BM>(row, kk * 2 + (lane >> 4))), af[mt][0], af[mt][1], af[mt][2],
                    af[mt][3]);
          }
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t b0, b1, b2, b3;
          const int row = kw * C::BNW + np * 16 + (lane & 7) + ((lane >> 4) << 3);
          ldsm_x4(smem_u32(kt + soff<D, BN>(row, kk * 2 + ((lane >> 3) & 1))), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816(s[mt][2 * np], af[mt], b0, b1);
            mma16816(s[mt][2 * np + 1], af[mt], b2, b3);
          }
        }
      }

      if constexpr (kMasked) {
        const int n0 = jb * BN;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = n0 + kw * C::BNW + nt * 8 + 2 * t4 + (e & 1);
              if (col > kmax[mt][e >> 1]) s[mt][nt][e] = neg_inf();
            }
      }

      // Online softmax. m_run is kept in raw logit units; the scale is folded into exp2.
      float alpha[MT][2];
      bool any_rescale = false;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = neg_inf();
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float mo = m_run[mt][h];
          bool upd;
          if constexpr (kLazyRescale) {
            upd = (mx - mo) * sl2 > 8.f;  // keep a stale max while exp2 stays below 2^8
          } else {
            upd = mx > mo;
          }
          float al = 1.f;
          if (upd) {
            if constexpr (kExp2) {
              al = fast_exp2((mo - mx) * sl2);
            } else {
              al = expf((mo - mx) * scale);
            }
            m_run[mt][h] = mx;
            any_rescale = true;
          }
          alpha[mt][h] = al;
          const float mu = m_run[mt][h] == neg_inf() ? 0.f : m_run[mt][h];
          float rs = 0.f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float p;
              if constexpr (kExp2) {
                p = fast_exp2(fmaf(s[mt][nt][2 * h + e], sl2, -mu * sl2));
              } else {
                p = expf(s[mt][nt][2 * h + e] * scale - mu * scale);
              }
              s[mt][nt][2 * h + e] = p;
              rs += p;
            }
          l_run[mt][h] = l_run[mt][h] * al + rs;
        }
      bool do_rescale = true;
      if constexpr (kLazyRescale) do_rescale = __any_sync(0xffffffffu, any_rescale);
      if (do_rescale) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            o[mt][dt][0] *= alpha[mt][0];
            o[mt][dt][1] *= alpha[mt][0];
            o[mt][dt][2] *= alpha[mt][1];
            o[mt][dt][3] *= alpha[mt][1];
          }
      }

      // O += P V, P re-used from the S accumulators as bf16 A fragments.
#pragma unroll
      for (int kk = 0; kk < C::KN; ++kk) {
        uint32_t pf[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          pf[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pf[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pf[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pf[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
          uint32_t b0, b1, b2, b3;
          const int row = kw * C::BNW + kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
          ldsm_x4_t(smem_u32(vt + soff<D, BN>(row, dp * 2 + (lane >> 4))), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816(o[mt][2 * dp], pf[mt], b0, b1);
            mma16816(o[mt][2 * dp + 1], pf[mt], b2, b3);
          }
        }
      }
    };

    auto run_block = [&](int j) {
      const int jb = b_lo + j;
      if constexpr (kMaskSplit) {
        if (jb >= n_full) {
          compute(jb, stage_of(j), TrueTag{});
        } else {
          compute(jb, stage_of(j), FalseTag{});
        }
      } else {
        compute(jb, stage_of(j), TrueTag{});
      }
    };

    for (int j = 0; j < nb; ++j) {
      if constexpr (kStages == 1) {
        if (j > 0) __syncthreads();  // the previous block is consumed
        issue(b_lo + j, stage_of(j));
        if constexpr (kBulk) {
          mbar_wait(bar0 + 8 * stage_of(j), parity_of(j));
        } else {
          cp_async_commit();
          cp_async_wait<0>();
        }
        __syncthreads();
      } else {
        if constexpr (kBulk) {
          mbar_wait(bar0 + 8 * stage_of(j), parity_of(j));
        } else {
          cp_async_wait<kStages - 2>();
        }
        __syncthreads();
        if (j + kStages - 1 < nb) issue(b_lo + j + kStages - 1, stage_of(j + kStages - 1));
        if constexpr (!kBulk) cp_async_commit();
      }
      run_block(j);
    }
    if constexpr (!kBulk) cp_async_wait<0>();
    seq_base += uint32_t(nb);

    // Epilogue: finish the row sums across the quad, then store.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[mt][h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        l_run[mt][h] = l;
      }
    if constexpr (C::KW > 1) {
      // Key warps merge (decode_kv_warps): (max, sum) of every key warp, then each output rescaled
      // to the rows' common max; key warp 0 adds the others' and stores below.
      __syncthreads();  // every warp is done with the K/V stages: the merge reuses them
      float* mo = reinterpret_cast<float*>(k_s);                        // [KW - 1][BM][D]
      float2* mml = reinterpret_cast<float2*>(mo + (C::KW - 1) * BM * D);  // [KW][BM]
      auto to_exp = [&](float x) { return kExp2 ? fast_exp2(x * sl2) : expf(x * scale); };
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (t4 == 0) mml[kw * BM + rw * C::RPW + mt * 16 + g + 8 * h] = make_float2(m_run[mt][h], l_run[mt][h]);
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = rw * C::RPW + mt * 16 + g + 8 * h;
          float mx = neg_inf();
#pragma unroll
          for (int w = 0; w < C::KW; ++w) mx = fmaxf(mx, mml[w * BM + row].x);
          float l = 0.f;
#pragma unroll
          for (int w = 0; w < C::KW; ++w) {
            const float2 ml = mml[w * BM + row];
            if (ml.x != neg_inf()) l += ml.y * to_exp(ml.x - mx);
          }
          const float f = m_run[mt][h] == neg_inf() ? 0.f : to_exp(m_run[mt][h] - mx);
          m_run[mt][h] = mx;
          l_run[mt][h] = l;
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            o[mt][dt][2 * h] *= f;
            o[mt][dt][2 * h + 1] *= f;
            if (kw > 0)
              *reinterpret_cast<float2*>(mo + ((kw - 1) * BM + row) * D + dt * 8 + 2 * t4) =
                  make_float2(o[mt][dt][2 * h], o[mt][dt][2 * h + 1]);
          }
        }
      __syncthreads();
      if (kw == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = rw * C::RPW + mt * 16 + g + 8 * h;
            for (int w = 1; w < C::KW; ++w)
#pragma unroll
              for (int dt = 0; dt < DT; ++dt) {
                const float2 v = *reinterpret_cast<const float2*>(mo + ((w - 1) * BM + row) * D + dt * 8 + 2 * t4);
                o[mt][dt][2 * h] += v.x;
                o[mt][dt][2 * h + 1] += v.y;
              }
          }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + rw * C::RPW + mt * 16 + g + 8 * h;
        if (r >= sc.mtotal || kw != 0) continue;  // key warp 0 stores
        const int qi = r / sc.gp;
        const int hq = hbase + r % sc.gp;
        if (sc.splits == 1) {
          const float inv = l_run[mt][h] > 0.f ? 1.f / l_run[mt][h] : 0.f;
          __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + id.batch * a.o_batch_stride +
                                hq * a.o_head_stride + (long long)qi * a.o_row_stride;
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            *reinterpret_cast<__nv_bfloat162*>(orow + dt * 8 + 2 * t4) =
                __floats2bfloat162_rn(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
          }
        } else {
          const long long row_id = ((long long)id.batch * a.heads_q + hq) * sq + qi;
          const long long rows = (long long)a.batch * a.heads_q * sq;
          const long long w = (long long)id.split * rows + row_id;
          float2* wo = reinterpret_cast<float2*>(sc.ws_o) + w * (D / 2);
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) wo[dt * 4 + t4] = make_float2(o[mt][dt][2 * h], o[mt][dt][2 * h + 1]);
          if (t4 == 0) {
            const float mr = m_run[mt][h];
            sc.ws_ml[w] = make_float2(mr == neg_inf() ? neg_inf() : mr * sl2, l_run[mt][h]);
          }
        }
      }
  }
}

int num_sms() {
  static int n = 0;
  if (n == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
  }
  return n;
}

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

// Prepares a kernel once per process: opt-in shared memory and the CTAs per SM it allows.
template <int D, bool Dec>
int prepare(int* ctas_per_sm) {
  static int cached = 0;
  static cudaError_t status = cudaSuccess;
  if (cached == 0 && status == cudaSuccess) {
    status = cudaFuncSetAttribute(attn_fwd<D, Dec>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Cfg<D, Dec>::kSmem));
    int n = 0;
    if (status == cudaSuccess)
      status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attn_fwd<D, Dec>, Cfg<D, Dec>::kThreads,
                                                             Cfg<D, Dec>::kSmem);
    cached = n > 0 ? n : 1;
  }
  *ctas_per_sm = cached;
  return status;
}

// Query heads packed per tile row group (GQA packing), decided with the main tile.
template <int D>
int pack_of(const SocraticAttentionArgs* a) {
  const int group = a->heads_q / a->heads_kv;
  bool pack = false;
  if constexpr (kPackGqa == 1) pack = group > 1 && a->seqlen_q * group <= Cfg<D, false>::BM;
  if constexpr (kPackGqa == 2) pack = group > 1;
  return pack ? group : 1;
}

// The decode tile takes over when a head group has at most this many (packed) query rows.
constexpr int kDecodeRows = 64;

template <int D>
bool use_decode_tile(const SocraticAttentionArgs* a, int gp) {
  return kDecodeTile && (long long)a->seqlen_q * gp <= kDecodeRows;
}

template <int D, bool Dec>
Sched plan(const SocraticAttentionArgs* a, int gp, int ctas_per_sm) {
  using C = Cfg<D, Dec>;
  Sched s{};
  s.gp = gp;
  s.mtotal = a->seqlen_q * s.gp;
  s.m_blocks = (s.mtotal + C::BM - 1) / C::BM;
  s.heads_grid = gp > 1 ? a->heads_kv : a->heads_q;
  s.splits = 1;
  const long long base = (long long)s.m_blocks * s.heads_grid * a->batch;
  if constexpr (kSplitWaves > 0) {
    const long long target = (long long)kSplitWaves * num_sms() * ctas_per_sm;
    const int kv_blocks = (a->seqlen_k + C::BN - 1) / C::BN;
    if (base < target && kv_blocks >= 4) {
      long long want = (target + base - 1) / base;
      want = want < kv_blocks / 2 ? want : kv_blocks / 2;
      want = want < kMaxSplits ? want : kMaxSplits;
      s.splits = want > 1 ? int(want) : 1;
    }
  }
  s.tiles = int(base * s.splits);
  return s;
}

template <int D>
unsigned long long workspace_for(const Sched& s, const SocraticAttentionArgs* a) {
  if (s.splits <= 1) return 0;
  const unsigned long long rows = (unsigned long long)a->batch * a->heads_q * a->seqlen_q;
  return (unsigned long long)s.splits * rows * (D * 4 + 8);
}

template <int D, bool Dec>
unsigned long long workspace_cfg(const SocraticAttentionArgs* a, int gp) {
  int ctas = 1;
  if (prepare<D, Dec>(&ctas) != cudaSuccess) return 0;
  return workspace_for<D>(plan<D, Dec>(a, gp, ctas), a);
}

template <int D>
unsigned long long workspace(const SocraticAttentionArgs* a) {
  const int gp = pack_of<D>(a);
  if constexpr (kDecodeTile) {
    if (use_decode_tile<D>(a, gp)) return workspace_cfg<D, true>(a, gp);
  }
  return workspace_cfg<D, false>(a, gp);
}

template <int D, bool Dec>
int launch_cfg(const SocraticAttentionArgs* a, cudaStream_t stream, int gp) {
  int ctas = 1;
  int err = prepare<D, Dec>(&ctas);
  if (err != cudaSuccess) return err;
  Sched s = plan<D, Dec>(a, gp, ctas);
  if (s.splits > 1) {
    const unsigned long long need = workspace_for<D>(s, a);
    if (a->workspace == nullptr || a->workspace_bytes < need) {
      s.splits = 1;  // no scratch: run unsplit
      s.tiles = s.m_blocks * s.heads_grid * a->batch;
    } else {
      const unsigned long long rows = (unsigned long long)a->batch * a->heads_q * a->seqlen_q;
      s.ws_o = static_cast<float*>(a->workspace);
      s.ws_ml = reinterpret_cast<float2*>(static_cast<unsigned char*>(a->workspace) +
                                          (unsigned long long)s.splits * rows * D * 4);
    }
  }
  if (s.tiles <= 0) return cudaSuccess;
  int grid = s.tiles;
  if constexpr (kPersistent) {
    const int cap = num_sms() * ctas;
    grid = grid < cap ? grid : cap;
  }
  attn_fwd<D, Dec><<<grid, Cfg<D, Dec>::kThreads, Cfg<D, Dec>::kSmem, stream>>>(*a, s);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if (s.splits > 1) {
    if (const cudaError_t ce = launch_combine<D, false>(a, s, stream); ce != cudaSuccess) return ce;
    e = cudaGetLastError();
  }
  return e;
}

template <int D>
int launch(const SocraticAttentionArgs* a, cudaStream_t stream) {
  const int gp = pack_of<D>(a);
  if constexpr (kDecodeTile) {
    if (use_decode_tile<D>(a, gp)) return launch_cfg<D, true>(a, stream, gp);
  }
  return launch_cfg<D, false>(a, stream, gp);
}

// ---------------------------------------------------------------------------------------
// Hopper layer (mma=wgmma, sm_90a): warp-specialized wgmma kernel for every shape whose head
// group has more than kDecodeRows (packed) query rows; decode shapes keep the mma.sync path
// above. One CTA = one producer warpgroup (cp.async into 128-byte swizzled tiles, completion
// signalled on mbarriers) + HC consumer warpgroups of 64 query rows each (S = Q K^T by wgmma
// with both operands in shared memory, online softmax in registers, O += P V by wgmma with P
// as the register A operand and V as an MN-major shared-memory B operand).
// ---------------------------------------------------------------------------------------
constexpr int kWgConsumers = 2;  // wg_consumers
constexpr int kWgStages = 2;  // wg_stages
constexpr bool kWgOverlap = true;  // wg_overlap
constexpr bool kWgPingpong = true;  // wg_pingpong
constexpr bool kWgSplitBalanced = false;  // wg_split_rule=fill
constexpr int kWgSplitCost = 0;  // wg_split_cost
constexpr bool kWgDecodeWgmma = false;  // wg_decode=mma_sync
constexpr int kWgL2Promotion = 256;  // wg_l2_promotion
constexpr bool kWgDescOffset = false;  // wg_desc=fields
constexpr bool kWgDescHoist = false;
constexpr bool kWgL2HintKv = false;  // wg_l2_hint=none
constexpr bool kWgL2HintQ = false;
constexpr bool kWgIdleSkip = false;  // wg_idle_rows=compute
constexpr bool kWgKvFenceCpAsync = false;  // wg_kv_fence=every_block
constexpr bool kWgKvWaitFirst = false;  // wg_kv_wait=each
constexpr bool kWgKBeforeTurn = false;  // wg_k_wait=in_turn
constexpr bool kWgEpilogueStaged = false;  // wg_epilogue=direct
constexpr bool kWgEpilogueTma = false;
constexpr bool kWgEpilogueOneQ = false;  // wg_epilogue_one_q
constexpr int kWgVRelease = 0;  // wg_v_release=after_softmax
constexpr bool kWgSoloDecode = false;  // wg_solo_decode
constexpr bool kWgKAhead = false;  // wg_kv_order=kv
constexpr bool kWgFullOrderM = false;  // wg_full_order=sections
constexpr bool kWgTilePublish = false;  // wg_tile_decode=consumers
constexpr bool kWgTwoP = false;  // wg_p_buffers=1
constexpr int kWgCluster = 1;  // wg_cluster
constexpr int kRegsProducer = 40;
constexpr int kRegsConsumer = 232;
constexpr bool kWgWideD64 = false;  // wg_wide_d64
// consumer warpgroups (HC), setmaxnreg targets (RP, RC), and whether the head_dim runs with tensor
// maps only (no cp.async instantiation: the mma.sync kernel takes the rest)
template <int D>
struct WgC {
  static constexpr int HC = kWgConsumers, RP = kRegsProducer, RC = kRegsConsumer;
  static constexpr bool kMapsOnly = false;
};
template <int D>
struct WgBlockN;
template <>
struct WgBlockN<64> {
  static constexpr int value = 128;
};
template <>
struct WgBlockN<128> {
  static constexpr int value = 128;
};
template <>
struct WgBlockN<256> {
  static constexpr int value = 64;
};
// wg_stages_d64 / wg_stages_d128: K/V stages per head_dim (kWgStages where unset)
template <int D>
struct WgStages {
  static constexpr int value = kWgStages;
};
constexpr bool kWgQRing = false;  // wg_q_stages=1
// Q buffers per head_dim (two where shared memory holds them)
template <int D>
struct WgQRing;
template <>
struct WgQRing<64> {
  static constexpr int QS = 1;
};
template <>
struct WgQRing<128> {
  static constexpr int QS = 1;
};
template <>
struct WgQRing<256> {
  static constexpr int QS = 1;
};
constexpr long long kPLongBlocks = 0;  // wg_p_long_blocks
// wg_v_ring=same: V stages per head_dim (K's, or one more where shared memory holds it)
template <int D>
struct WgVStages {
  static constexpr int value = WgStages<D>::value;
};

// Shared-memory tile layout (bf16): 64-column panels, each panel ROWS rows of 128 bytes; the
// 16-byte chunk index is XOR-ed with (row % 8). With 1024-byte aligned panels this is the
// layout a wgmma descriptor calls 128-byte swizzle, for K-major (Q, K) and MN-major (V) use.
template <int ROWS>
__device__ __forceinline__ int sw_off(int row, int ch) {
  return (ch >> 3) * (ROWS * 64) + row * 64 + (((ch & 7) ^ (row & 7)) << 3);
}

// wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets (all
// >> 4, 14 bits each), layout type 1 = 128-byte swizzle in bits 62-63.
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}
// wg_desc=offset: a wgmma descriptor is its tile's descriptor plus the k-step's byte offset >> 4,
// added to the low word: ptxas then spends about three uniform operations per wgmma (the add and
// the constant high words) where it repacked the three fields in about six. The consumer's
// warpgroup index comes from lane 0, so that Q's descriptors are uniform too instead of sixteen
// per-thread registers read back with R2UR. Measured alone 0.995x, with wg_epilogue=smem 1.005x.
// The descriptor of tile + off from the tile's own. The start-address field
// holds addr >> 4 in 14 bits and a shared-memory address stays below 2^18, so off >> 4 adds to
// the low word without a carry out of the field.
__device__ __forceinline__ uint64_t wg_desc_at(uint32_t tile, uint32_t off, uint32_t lbo, uint32_t sbo) {
  const uint32_t lo = ((tile & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16);
  const uint32_t hi = ((sbo >> 4) & 0x3FFF) | (1u << 30);
  uint64_t d;
  asm("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo + (off >> 4)), "r"(hi));
  return d;
}
// K-major operand (Q as A, K as B): rows at 128 bytes, 8-row groups 1024 bytes apart (SBO);
// the k16 step kk moves 32 bytes inside a panel and a whole panel every 4 steps. LBO is unused
// by a K-major swizzled layout (encoded as 1).
template <int ROWS>
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t tile, int row0, int kk) {
  const uint32_t off = (kk >> 2) * (ROWS * 128) + row0 * 128 + (kk & 3) * 32;
  if constexpr (kWgDescOffset) return wg_desc_at(tile, off, 16, 1024);
  else return wg_desc(tile + off, 16, 1024);
}
// MN-major operand (V as B of P V, N = head_dim): along N, 64 columns per panel and the next
// panel ROWS*128 bytes further (LBO); along K (keys), 8-key groups 1024 bytes apart (SBO); the
// k16 step kk starts 16 keys (2048 bytes) further.
template <int ROWS>
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t tile, int kk) {
#if SOCRATIC_SM90_VDESC_SWAP
  if constexpr (kWgDescOffset) return wg_desc_at(tile, kk * 2048, 1024, ROWS * 128);
  else return wg_desc(tile + kk * 2048, 1024, ROWS * 128);
#else
  if constexpr (kWgDescOffset) return wg_desc_at(tile, kk * 2048, ROWS * 128, 1024);
  else return wg_desc(tile + kk * 2048, ROWS * 128, 1024);
#endif
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Ties accumulator registers to this point so the compiler neither reads them before the
// wgmma that writes them has been waited for, nor moves writes past the wgmma reading them.
template <int N>
__device__ __forceinline__ void wg_fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
__device__ __forceinline__ void fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The mbarrier gets one arrival when every cp.async this thread issued so far has landed.
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// wg_cluster=2: the CTA's rank in its cluster, and an arrival on the peer CTA's barrier at the same
// shared-memory offset.
__device__ __forceinline__ int cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return int(r);
}
__device__ __forceinline__ void mbar_arrive_peer(uint32_t bar, int peer) {
  asm volatile(
      "{\n.reg .b32 r;\nmapa.shared::cluster.u32 r, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [r];\n}\n" ::"r"(bar),
      "r"(peer)
      : "memory");
}

// wg_q_stages=2 (wg_load=tma): tile t's Q in buffer t % QS (WgQRing<D>::QS: 1 where two do not
// fit or the knob is 1), so the producer loads the next tile's Q as soon as the tile before last
// has released its buffer.
// The mbarriers of tile t's Q buffer: buffer 0 keeps q_full/q_empty, buffer 1 sits after the ring's.
__device__ __forceinline__ uint32_t q_full_bar(uint32_t bars, int t, int qs, int stages) {
  return (qs == 2 && (t & 1)) ? bars + 8 * (2 + 4 * stages) : bars;
}
__device__ __forceinline__ uint32_t q_empty_bar(uint32_t bars, int t, int qs, int stages) {
  return (qs == 2 && (t & 1)) ? bars + 8 * (3 + 4 * stages) : bars + 8;
}

template <int N>
__device__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate);
template <int N>
__device__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db);
template <>
__device__ __forceinline__ void wgmma_ss<64>(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_ss<128>(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_rs<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_rs<256>(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

template <int D>
struct Sm90Cfg {
  static constexpr int BM = 64 * WgC<D>::HC;  // query rows per CTA
  static constexpr int BN = WgBlockN<D>::value;  // keys per block
  static constexpr int kThreads = 128 * (WgC<D>::HC + 1);
  static constexpr int CH = D / 8;
  static constexpr int kQBytes = BM * D * 2;
  static constexpr int kKVBytes = BN * D * 2;
  static constexpr int QS = WgQRing<D>::QS;  // Q buffers
  // wg_v_ring=deeper: V's ring may be deeper than K's (WgVStages); S also spaces the barriers
  static constexpr int SK = WgStages<D>::value;  // K stages (wg_stages_d64/d128)
  static constexpr int S = WgVStages<D>::value;  // V stages, and the barriers' spacing
  static_assert(S >= SK, "V's ring is at least as deep as K's");
  static constexpr int kBarOff = QS * kQBytes + (SK + S) * kKVBytes;
  static constexpr int kBars = 2 * QS + 4 * S;  // q_full, q_empty, k/v_full, k/v_empty
  // wg_scheduler=dynamic: two tile slots after the mbarriers, of one word (the index) or, with
  // wg_tile_decode=producer, 48 bytes (the whole decode)
  static constexpr int kSlotOff = kBarOff + 8 * kBars;
  static constexpr int kSlot = kWgTilePublish ? 48 : 4;
  static constexpr int kSlotBytes = kWgDynamic ? 2 * kSlot : 0;
  static constexpr size_t kSmem = size_t(kSlotOff + kSlotBytes) + 1024;  // + alignment slack
  static_assert(BN % 16 == 0 && BN <= 256, "block_n must be a multiple of 16, at most 256");
};

// wg_scheduler=dynamic (persistent, wg_q_stages=2, the copy-engine producer): on a causal call with
// more tiles than CTAs, a CTA's first tile is its block index as before, and each later one is
// claimed by its producer from a counter in the workspace (grid + the counter's old value), so the
// tiles still start in heavy_first's order but each goes to the CTA that is free first instead of
// every gridDim.x-th one (round robin leaves the CTAs that drew heavy tiles working long after the
// others; FA3 schedules causal tiles this way too). The producer leaves the claimed index in one of
// two slots beside the Q ring and arms the Q buffer's full barrier; the consumers read it after
// waiting on that barrier. Past the last tile it leaves `tiles` there and arrives on the barrier
// without a copy, which ends the consumers' loop. The host zeroes the counter on the stream before
// every such launch (the harness poisons the workspace); workspace_any asks for its 16 bytes.
// The tile slots (two 32-bit words after the mbarriers).
__device__ __forceinline__ void slot_store(uint32_t addr, int v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ int slot_load(uint32_t addr) {
  int v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// A name made dependent on the template's head dim, so that code under a false `if constexpr` may
// name what only some settings declare (wg_epilogue=tma's O map in Sm90Maps, the kernel's maps).
template <int D, class T>
__host__ __device__ __forceinline__ T& dependent(T& x) {
  return x;
}

// wg_epilogue=smem|tma: shared-memory stores and loads by address.
__device__ __forceinline__ void sts_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 lds_b128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// One tile's place in the problem and its key-block range (shared by producer and consumers).
struct Sm90Tile {
  TileId id;
  int m0, kv_head, hbase;
  int b_lo, nb;  // key blocks [b_lo, b_lo + nb) of this tile's split
  int n_full;    // key blocks below n_full need no mask
};
// wg_tile_decode=producer (wg_scheduler=dynamic): the copy-engine producer decodes each tile once
// (sm90_tile: the section order's divisions, the GQA head, the causal key range) and leaves the
// whole decode, not just the index, in the tile's slot beside its Q; the consumers read it after
// the Q buffer's full barrier, whichever order the call takes (the producer marks the end in the
// static order too). Measured on the H200 (Nsight Compute, d128 s512 full), each consumer warp
// spent about 436 instructions with eight integer divisions before a tile's first wgmma, 14% of
// the samples, where FA3 spends 38. The consumers' query row -> (query, head) mapping also skips
// its division when no GQA group is packed (gp 1). The cp.async build decodes as before.
// A tile's decode in its slot (12 words, the last unused; word 0 the index).
__device__ __forceinline__ void tile_publish(uint32_t addr, int tile, const Sm90Tile& x) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(tile), "r"(x.id.mb),
               "r"(x.id.head), "r"(x.id.batch) : "memory");
  asm volatile("st.shared.v4.b32 [%0+16], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x.id.split), "r"(x.m0),
               "r"(x.kv_head), "r"(x.hbase) : "memory");
  asm volatile("st.shared.v4.b32 [%0+32], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x.b_lo), "r"(x.nb),
               "r"(x.n_full), "r"(0) : "memory");
}
__device__ __forceinline__ int tile_read(uint32_t addr, Sm90Tile& x) {
  int tile;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(tile), "=r"(x.id.mb), "=r"(x.id.head), "=r"(x.id.batch)
               : "r"(addr)
               : "memory");
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4+16];\n"
               : "=r"(x.id.split), "=r"(x.m0), "=r"(x.kv_head), "=r"(x.hbase)
               : "r"(addr)
               : "memory");
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%3+32];\n\tld.shared.b32 %2, [%3+40];\n"
               : "=r"(x.b_lo), "=r"(x.nb), "=r"(x.n_full) : "r"(addr) : "memory");
  return tile;
}

// wg_l2_sections=N (kWgL2Sections MB): the Hopper kernel's tiles (and so the order the persistent CTAs
// take them in) go heavy first inside sections of (head, batch, split) units whose distinct K and V
// fit in N MB of L2, so the m blocks that read one K/V head run within a section of each other (with
// one grid-wide heavy-first order they are a whole layer of units apart, and at short sequences that
// layer's K/V overflows L2: every m block re-reads its K/V from HBM). The budget is counted in K/V
// units (kv head, batch, split): without GQA packing the grid's heads are query heads and the `group`
// of them that share a K/V head are adjacent (kv head = head / group), so a section is a whole number
// of groups; with packing the grid's heads are K/V heads already (group 1). A call whose whole K/V
// fits is one section, exactly grid_order=heavy_first. The host sizes the sections once per call
// (Sched::l2_units); the producers and the consumers all decode tiles through sm90_tile, so one call
// there is the whole change on the device.
constexpr long long kWgL2SectionBytes = kWgL2Sections * 1024LL * 1024;
// Units per section, once per call on the host (after the split-KV choice): the tile decode
// below runs for every tile in every producer and consumer, and this has a 64-bit division.
inline int l2_section_units(const Sched& s, int batch, int seqlen_k, int head_dim, int group) {
  const int units = s.heads_grid * batch * s.splits;
  const int kv_units = units / group;  // distinct (kv head, batch, split)
  const long long kv = 4LL * head_dim * ((seqlen_k + s.splits - 1) / s.splits);  // K + V of a K/V unit
  long long fit = kWgL2SectionBytes / (kv > 0 ? kv : 1);  // K/V units per section
  // the call's whole K/V (kv heads x batch x seqlen_k) fits: one section, exactly heavy_first
  if (4LL * head_dim * seqlen_k * (kv_units / s.splits) <= kWgL2SectionBytes) fit = kv_units;
  fit = fit < 1 ? 1 : (fit < kv_units ? fit : kv_units);
  // as few sections as fit allows, of equal size: a small last section would run its heavy tiles
  // alone at the end of the call (8 units at 7 a section: 4 + 4, not 7 + 1)
  const long long sections = (kv_units + fit - 1) / fit;
  return group * int((kv_units + sections - 1) / sections);
}
__device__ __forceinline__ TileId decode_tile_l2(int t, const Sched& s, int batch) {
  const int units = s.heads_grid * batch * s.splits;
  const int G = s.l2_units;  // units per section (l2_section_units)
  const int sec = t / (G * s.m_blocks);
  const int r = t - sec * G * s.m_blocks;
  const int gs = min(G, units - sec * G);  // units of this section (the last may hold fewer)
  int u = sec * G + r % gs;
  TileId id;
  id.head = u % s.heads_grid;
  u /= s.heads_grid;
  id.batch = u % batch;
  id.split = u / batch;
  id.mb = s.m_blocks - 1 - r / gs;
  return id;
}

template <int BM, int BN>
__device__ __forceinline__ Sm90Tile sm90_tile(int tile, const SocraticAttentionArgs& a, const Sched& sc) {
  Sm90Tile x;
  const int sk = a.seqlen_k, offset = a.seqlen_k - a.seqlen_q;
  if constexpr (kWgL2Sections > 0) x.id = decode_tile_l2(tile, sc, a.batch);  // wg_l2_sections
  else x.id = decode_tile(tile, sc, a.batch);
  x.m0 = x.id.mb * BM;
  x.kv_head = sc.gp > 1 ? x.id.head : x.id.head / (a.heads_q / a.heads_kv);
  x.hbase = sc.gp > 1 ? x.id.head * sc.gp : x.id.head;
  const int m_last = min(x.m0 + BM, sc.mtotal) - 1;
  const int qi_first = x.m0 / sc.gp, qi_last = m_last / sc.gp;
  int kv_hi = sk;
  if (kCausalSkip && a.causal) kv_hi = max(0, min(sk, qi_last + offset + 1));
  const int nblocks = (kv_hi + BN - 1) / BN;
  const int per = (nblocks + sc.splits - 1) / sc.splits;
  x.b_lo = min(nblocks, x.id.split * per);
  x.nb = min(nblocks, x.b_lo + per) - x.b_lo;
  const int kmin_tile = a.causal ? min(qi_first + offset, sk - 1) : sk - 1;
  x.n_full = kmin_tile + 1 > 0 ? (kmin_tile + 1) / BN : 0;
  return x;
}

// no copy-engine build in this file (where there is one, the kernel's own kTma and kSolo hide these)
constexpr bool kTma = false;
constexpr bool kSolo = false;
constexpr bool kLong = false;
constexpr int kCl = 1;
struct Sm90NoMaps {
  static constexpr int o_ok = 0;
};
constexpr Sm90NoMaps maps{};  // the kernel's tensor maps: none, so no O map (wg_epilogue=tma)
// the copy-engine producer, named only under if constexpr (kTma)
template <int D, int kCl, class... T>
__device__ void sm90_produce_tma(const T&...);
template <int D>
__global__ void __launch_bounds__(Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(const SocraticAttentionArgs a, const Sched sc) {
  using C = Sm90Cfg<D>;
  // wg_solo_decode (wg_load=tma, wg_decode=wgmma): a call whose packed query rows fit the first
  // consumer warpgroup (sc.mtotal <= 64: decode) runs the kSolo instantiation, launched with 256
  // threads: the producer warpgroup and one consumer warpgroup. Its empty barriers expect that
  // warpgroup's four warps, it takes no turns (a named barrier of 256 threads would wait for a
  // warpgroup that is not there) and keeps the registers it was compiled with (no setmaxnreg). The
  // shared-memory layout, tile order and tensor maps are the ordinary instantiation's (the rows of Q
  // past the first warpgroup's are loaded and nothing reads them). FA3 runs decode at d128 on one MMA
  // warpgroup; stop 36: +1.0% on decode against wgmma-tma-k (docs/family.md).
  constexpr int HC = kSolo ? 1 : WgC<D>::HC;  // consumer warpgroups launched
  constexpr int BM = C::BM, BN = C::BN, CH = C::CH, S = C::S, SK = C::SK;
  constexpr int NT = BN / 8, DT = D / 8, KD = D / 16, KN = BN / 16;
  // wg_combine_pdl: the combine behind a split call may launch once every CTA has started
  if constexpr (kCombinePdl) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  extern __shared__ __align__(128) unsigned char smem_h[];
  const uint32_t raw = smem_u32(smem_h);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t q_s = base;
  const uint32_t k_s = q_s + C::QS * C::kQBytes;
  const uint32_t v_s = k_s + SK * C::kKVBytes;
  const uint32_t bars = base + C::kBarOff;
  const uint32_t q_full = bars, q_empty = bars + 8;
  auto k_full = [&](int s) { return bars + 8 * (2 + s); };
  auto v_full = [&](int s) { return bars + 8 * (2 + S + s); };
  auto k_empty = [&](int s) { return bars + 8 * (2 + 2 * S + s); };
  auto v_empty = [&](int s) { return bars + 8 * (2 + 3 * S + s); };

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  if (tid == 0) {
    mbar_init(q_full, kTma ? 1 : 128);
    mbar_init(q_empty, 4 * HC);
    for (int s = 0; s < S; ++s) {
      mbar_init(k_full(s), kTma ? 1 : 128);
      mbar_init(v_full(s), kTma ? 1 : 128);
      mbar_init(k_empty(s), 4 * HC * kCl);  // wg_cluster: both CTAs' consumer warps
      mbar_init(v_empty(s), 4 * HC * kCl);
    }
    if constexpr (C::QS == 2) {
      mbar_init(q_full_bar(bars, 1, 2, S), kTma ? 1 : 128);
      mbar_init(q_empty_bar(bars, 1, 2, S), 4 * HC);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if constexpr (kCl > 1) {  // wg_cluster: the peer's barriers are initialized before any copy or arrival
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  }

  const int sq = a.seqlen_q, sk = a.seqlen_k;
  const int offset = sk - sq;
  // Tiles of this CTA: one (grid of all tiles), or every gridDim.x-th (persistent).
  const int step = kPersistent ? int(gridDim.x) : sc.tiles;

  if (wg == 0) {
    // ---- producer warpgroup: Q once, then K and V blocks into the stage ring ----
    if constexpr (HC > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WgC<D>::RP));
    if constexpr (kTma) {  // wg_load=tma: one thread drives the copy engine
      if (tid == 0) sm90_produce_tma<D, kCl>(a, sc, maps, q_s, k_s, v_s, bars);
      return;
    }
    const int p = tid;  // 0..127
    // Each thread copies chunk ch of rows row0, row0 + R, ...: its swizzled offset within the
    // tile repeats every pass (R a multiple of 8) or every other pass (R = 4), so a pass costs a
    // pointer step and one cp.async with an immediate shared-memory offset.
    constexpr int R = 128 / CH;
    static_assert(BN % R == 0 && (R % 8 == 0 || 8 % R == 0), "producer passes");
    const int ch = p % CH, row0 = p / CH;
    const uint32_t off0 = (ch >> 3) * (BN * 128) + row0 * 128 + (((ch & 7) ^ (row0 & 7)) << 4);
    const uint32_t off1 = (ch >> 3) * (BN * 128) + row0 * 128 + (((ch & 7) ^ ((row0 + R) & 7)) << 4);
    auto load_tile = [&](uint32_t tile, const __nv_bfloat16* rows, long long stride, int n0) {
      const __nv_bfloat16* src = rows + (long long)(n0 + row0) * stride + ch * 8;
      const long long rstep = (long long)R * stride;
      if (n0 + BN <= sk) {
#pragma unroll
        for (int i = 0; i < BN / R; ++i)
          cp_async16(tile + ((R % 8 == 0 || (i & 1) == 0) ? off0 : off1) + i * R * 128, src + i * rstep, true);
      } else {
        const int valid = sk - n0 - row0;  // rows of this thread's column still inside the keys
#pragma unroll
        for (int i = 0; i < BN / R; ++i) {
          const bool ok = i * R < valid;
          cp_async16(tile + ((R % 8 == 0 || (i & 1) == 0) ? off0 : off1) + i * R * 128,
                     ok ? src + i * rstep : rows, ok);
        }
      }
    };
    uint32_t gb = 0;  // K/V blocks loaded so far (stage ring position)
    int tc = 0;       // tiles so far (Q buffer phase)
    for (int tile = blockIdx.x; tile < sc.tiles; tile += step, ++tc) {
      const Sm90Tile x = sm90_tile<BM, BN>(tile, a, sc);
      const TileId id = x.id;
      const int m0 = x.m0, hbase = x.hbase, b_lo = x.b_lo, nb = x.nb;
      const int kv_head = x.kv_head;
      if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);
      for (int idx = p; idx < BM * CH; idx += 128) {
        const int row = idx / CH, qc = idx % CH;
        const int r = m0 + row;
        const bool ok = r < sc.mtotal;
        const int qi = ok ? r / sc.gp : 0;
        const int hq = ok ? hbase + r % sc.gp : hbase;
        const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(a.q) + id.batch * a.q_batch_stride +
                                   hq * a.q_head_stride + (long long)qi * a.q_row_stride + qc * 8;
        cp_async16(q_s + uint32_t(tc % C::QS) * C::kQBytes + 2 * sw_off<BM>(row, qc), src, ok);
      }
      cp_async_arrive(q_full_bar(bars, tc, C::QS, S));
      const __nv_bfloat16* Kb = static_cast<const __nv_bfloat16*>(a.k) + id.batch * a.k_batch_stride +
                                kv_head * a.k_head_stride;
      const __nv_bfloat16* Vb = static_cast<const __nv_bfloat16*>(a.v) + id.batch * a.v_batch_stride +
                                kv_head * a.v_head_stride;
      for (int j = 0; j < nb; ++j) {
        const uint32_t gj = gb + uint32_t(j);
        const int st = int(gj % S);
        const uint32_t ph = (gj / S) & 1u;
        const int n0 = (b_lo + j) * BN;
        const int sk = int(gj % SK);  // wg_v_ring=deeper: K's stage in its own ring
        if (gj >= uint32_t(SK)) mbar_wait(k_empty(sk), ((gj / SK) & 1u) ^ 1u);
        load_tile(k_s + sk * C::kKVBytes, Kb, a.k_row_stride, n0);
        cp_async_arrive(k_full(sk));
        if (gj >= uint32_t(S)) mbar_wait(v_empty(st), ph ^ 1u);
        load_tile(v_s + st * C::kKVBytes, Vb, a.v_row_stride, n0);
        cp_async_arrive(v_full(st));
      }
      gb += uint32_t(nb);
    }
    cp_async_wait<0>();
    return;
  }

  // ---- consumer warpgroups: 64 query rows each ----
  if constexpr (HC > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WgC<D>::RC));
  // wg_desc=offset: the index from lane 0, warp-uniform, so Q's descriptors stay in uniform registers
  const int c = kWgDescOffset ? __shfl_sync(0xffffffffu, wg - 1, 0) : wg - 1;
  const int lane = tid & 31, w = (tid >> 5) & 3;
  const int g = lane >> 2, t4 = lane & 3;
  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  // a K/V stage: with wg_cluster, the peer CTA's producer fills it too, so both hear of the release
  const int peer = kCl > 1 ? cluster_rank() ^ 1 : 0;
  auto release_kv = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) {
      mbar_arrive(bar);
      if constexpr (kCl > 1) mbar_arrive_peer(bar, peer);
    }
  };
  const float scale = a.softmax_scale;
  const float sl2 = scale * 1.4426950408889634f;

  // Ping-pong (wg_pingpong, two consumers): named barrier 1 + c is this warpgroup's turn to
  // issue its wgmmas; after issuing it hands the turn to the other one, so one warpgroup's
  // softmax runs while the other's matrix products occupy the tensor cores.
  auto turn_wait = [&]() {
    if constexpr (kWgPingpong && HC > 1) asm volatile("bar.sync %0, 256;\n" ::"r"(1 + c) : "memory");
  };
  auto turn_pass = [&]() {
    // the next consumer's turn (round-robin over three with wg_wide_d64)
    if constexpr (kWgPingpong && HC > 1)
      asm volatile("bar.arrive %0, 256;\n" ::"r"(kWgWideD64 ? 1 + (c + 1) % WgC<D>::HC : 2 - c) : "memory");
  };
  if constexpr (kWgPingpong && HC > 1) {
    if (c == WgC<D>::HC - 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");  // consumer 0 goes first
  }

  uint32_t gb = 0;  // K/V blocks consumed so far (stage ring position)
  int tc = 0;       // tiles so far (Q buffer phase)
  // wg_scheduler=dynamic: the copy-engine consumers take each tile from the producer's slot (the
  // loop ends at the `tiles` it leaves there), with wg_tile_decode=producer its whole decode (in
  // either order); round robin otherwise
  const bool dyn = kWgDynamic && kTma && sc.tile_counter != nullptr;  // wg_scheduler=dynamic on this call
  for (int tile = blockIdx.x; kWgDynamic || tile < sc.tiles; tile += kWgDynamic ? 0 : step, ++tc) {
    Sm90Tile x;
    if constexpr (kWgTilePublish && kTma) {  // wg_tile_decode=producer: the producer left this tile's decode beside its Q
      mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);
      tile = tile_read(bars + 8 * C::kBars + C::kSlot * (tc & 1), x);
      if (tile >= sc.tiles) break;
    } else {
      if constexpr (kWgDynamic) {
        if (dyn) {  // the producer left this tile's index beside its Q
          mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);
          tile = slot_load(bars + 8 * C::kBars + C::kSlot * (tc & 1));
        } else if (tc > 0) {
          tile += step;
        }
        if (tile >= sc.tiles) break;
      }
      x = sm90_tile<BM, BN>(tile, a, sc);
    }
    const TileId id = x.id;
    const int m0 = x.m0, hbase = x.hbase, b_lo = x.b_lo, nb = x.nb;
    const int n_full = x.n_full;
    int kmax[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + c * 64 + w * 16 + g + 8 * h;
      const int qi = kWgTilePublish && sc.gp == 1 ? r : r / sc.gp;  // wg_tile_decode: no division without a GQA pack
      kmax[h] = (a.causal && r < sc.mtotal) ? min(qi + offset, sk - 1) : sk - 1;
    }

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float m_run[2] = {neg_inf(), neg_inf()};
    float l_run[2] = {0.f, 0.f};

    const uint32_t q_cur = q_s + uint32_t(tc % C::QS) * C::kQBytes;  // this tile's Q buffer
    // The Q buffer is free once this tile's last S = Q K^T has completed; with wg_epilogue=smem|tma
    // (kWgEpilogueStaged) it stages the unsplit output first, and goes back after the epilogue.
    // wg_epilogue=smem (wg_q_stages=2): at the head dims with two Q buffers, a tile's unsplit output
    // is staged in that tile's Q buffer, which the producer refills only for the tile after next: each
    // thread stores its bf16 pairs to shared memory (the Q tile's swizzled layout, conflict-free), the
    // warpgroup meets at a named barrier, and its 128 threads write the 64 rows to global memory in
    // 16-byte chunks, a row's chunks on consecutive threads (wg_epilogue=tma: one thread hands the
    // rows to the copy engine instead). Measured on the H200 (Nsight Compute, d128 s512 full), the
    // direct epilogue issued 524,288 global stores (4 bytes each) where FA3 issued 32,768, and its
    // warps stalled on the load/store queue and on the stores' source registers.
    auto release_q_now = [&]() { release(q_empty_bar(bars, tc, C::QS, S)); };
    // wg_epilogue_one_q: a head dim with one Q buffer (d256 beside two K/V stages) stages its unsplit
    // output there too, when O's map describes the call, and gives the buffer back after the copy
    // engine has read it; the producer then loads the next tile's Q only after this tile's epilogue.
    // Measured on the H200 (Nsight Compute, d256 s512 full, stop 28), the direct epilogue's global
    // stores held about 29% of the samples (load/store queue throttle); FA3 stores through the copy
    // engine there.
    const bool stage_o = kWgEpilogueStaged && (C::QS == 2 || (kWgEpilogueOneQ && kTma && maps.o_ok)) && sc.splits == 1;
    auto release_q = [&]() {
      if constexpr (kWgEpilogueStaged) {
        if (!stage_o) release_q_now();
      } else if constexpr (kWgQRing) {
        release(q_empty_bar(bars, tc, C::QS, S));
      } else {
        release(q_empty);  // one buffer (wg_q_stages=1); naming tc here renumbers the PTX
      }
    };
    mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);
    fence_async_smem();
    if (nb == 0) release_q();

    float s[BN / 2];     // S of the newest block, then its probabilities (fp32)
    uint32_t pf[KN][4];  // P of the block whose P V is next, as bf16 A fragments
    // wg_p_buffers=2 (kWgTwoP): P's second register set (d128, d256, the copy-engine build)
    // wg_p_long_blocks: long calls only
    constexpr bool kTwoP = kWgTwoP && D >= 128 && kTma && (kPLongBlocks == 0 || kLong);
    uint32_t pg[kTwoP ? KN : 1][4];

    // wg_kv_wait=first (wg_load=tma, wg_pingpong): in the copy-engine build only the first consumer
    // warpgroup in the turn order (c == 0) waits for a K/V block's full barrier; the others issue their
    // wgmmas on that block only after it has passed them the turn (named barriers, which order memory
    // among the warpgroups), so the block has landed by then. FA3's consumers do the same. The wait is
    // a shared-memory barrier probe and a branch on its result, inside each warpgroup's turn.
    // wg_kv_fence=cp_async (wg_load=tma): the consumers fence the async proxy after a K/V block's full
    // barrier only in the cp.async build. There the producer's cp.async writes are generic-proxy writes
    // that wgmma (an async-proxy reader) must be fenced from; the copy engine's writes are async-proxy
    // writes whose completion the barrier's transaction count already orders before the wait returns
    // (CUTLASS and FA3 issue no fence there). The fence compiles to MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC,
    // twice per block, inside the warpgroup's turn to issue its wgmmas.
    // wg_desc=hoist: Q's descriptors once per tile (at most 8 steps: d64, d128)
    constexpr bool kHoistQ = kWgDescHoist && KD <= 8;
    uint64_t qd[kHoistQ ? KD : 1];
    if constexpr (kHoistQ) {
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) qd[kk] = desc_kmajor<BM>(q_cur, c * 64, kk);
    }
    auto q_desc = [&](int kk) {
      if constexpr (kHoistQ) return qd[kk];
      else return desc_kmajor<BM>(q_cur, c * 64, kk);
    };
    // wg_k_wait=before_turn (wg_kv_wait=each): block j's K landed, waited for before the warpgroup's
    // turn to issue its wgmmas (FA3's order), not inside issue_qk; the turn then holds the two wgmma
    // chains and V's wait only.
    auto wait_k = [&](int j) {
      if constexpr (kWgKBeforeTurn) mbar_wait(k_full(int((gb + uint32_t(j)) % SK)), ((gb + uint32_t(j)) / SK) & 1u);
    };
    // S = Q K^T of block j, issued (not waited for).
    auto slot = [&](int j) { return int((gb + uint32_t(j)) % S); };
    auto kslot = [&](int j) { return int((gb + uint32_t(j)) % SK); };  // wg_v_ring=deeper: K's ring
    auto issue_qk = [&](int j) {
      const int st = int((gb + uint32_t(j)) % SK);
      if (!kWgKBeforeTurn && (!kWgKvWaitFirst || !kTma || c == 0))
        mbar_wait(k_full(st), ((gb + uint32_t(j)) / SK) & 1u);
      if constexpr (!kWgKvFenceCpAsync || !kTma) fence_async_smem();
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < KD; ++kk)
        wgmma_ss<BN>(s, q_desc(kk), desc_kmajor<BN>(k_s + st * C::kKVBytes, 0, kk), kk > 0);
      wg_commit();
    };
    // O += P V of block j, issued (not waited for).
    auto issue_pv = [&](int j, const uint32_t (&pa)[KN][4]) {
      const int st = int((gb + uint32_t(j)) % S);
      if (!kWgKvWaitFirst || !kTma || c == 0) mbar_wait(v_full(st), ((gb + uint32_t(j)) / S) & 1u);
      if constexpr (!kWgKvFenceCpAsync || !kTma) fence_async_smem();
      wg_fence_regs(o);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < KN; ++kk) wgmma_rs<D>(o, pa[kk], desc_mnmajor<BN>(v_s + st * C::kKVBytes, kk));
      wg_commit();
    };
    // Mask and online softmax of block j in s (in place: s becomes P); alpha rescales O. mid runs
    // between the two rows (wg_v_release=mid_softmax's wait for the previous P V; else nothing).
    auto softmax = [&](int j, float (&alpha)[2], bool& any_rescale, auto masked_tag, uint32_t (*pn)[4], auto mid) {
      constexpr bool kMasked = decltype(masked_tag)::value;
      if constexpr (kMasked) {
        const int n0 = (b_lo + j) * BN;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = n0 + nt * 8 + 2 * t4 + (e & 1);
            if (col > kmax[e >> 1]) s[nt * 4 + e] = neg_inf();
          }
      }
      any_rescale = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = neg_inf();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * h], s[nt * 4 + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mo = m_run[h];
        bool upd;
        if constexpr (kLazyRescale) {
          upd = (mx - mo) * sl2 > 8.f;
        } else {
          upd = mx > mo;
        }
        float al = 1.f;
        if (upd) {
          if constexpr (kExp2) {
            al = fast_exp2((mo - mx) * sl2);
          } else {
            al = expf((mo - mx) * scale);
          }
          m_run[h] = mx;
          any_rescale = true;
        }
        alpha[h] = al;
        const float mu = m_run[h] == neg_inf() ? 0.f : m_run[h];
        const float mus = mu * sl2;
        float rs = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float pv;
            if constexpr (kExp2) {
              pv = fast_exp2(fmaf(s[nt * 4 + 2 * h + e], sl2, -mus));
            } else {
              pv = expf(s[nt * 4 + 2 * h + e] * scale - mu * scale);
            }
            s[nt * 4 + 2 * h + e] = pv;
            rs += pv;
          }
        if constexpr (kTwoP) {  // wg_p_buffers=2: the row's P packed beside its exponentials
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            pn[nt / 2][(nt & 1) * 2 + h] = pack_bf16(s[nt * 4 + 2 * h], s[nt * 4 + 2 * h + 1]);
        }
        l_run[h] = l_run[h] * al + rs;
        if (h == 0) mid();  // wg_v_release=mid_softmax: between the two rows
      }
    };
    auto softmax_any = [&](int j, float (&alpha)[2], bool& any_rescale, uint32_t (*pn)[4], auto mid) {
      if constexpr (kMaskSplit) {
        if (b_lo + j >= n_full) {
          softmax(j, alpha, any_rescale, TrueTag{}, pn, mid);
        } else {
          softmax(j, alpha, any_rescale, FalseTag{}, pn, mid);
        }
      } else {
        softmax(j, alpha, any_rescale, TrueTag{}, pn, mid);
      }
    };
    auto rescale = [&](const float (&alpha)[2], bool any_rescale) {
      bool do_rescale = true;
      if constexpr (kLazyRescale) do_rescale = __any_sync(0xffffffffu, any_rescale);
      if (do_rescale) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          o[dt * 4 + 0] *= alpha[0];
          o[dt * 4 + 1] *= alpha[0];
          o[dt * 4 + 2] *= alpha[1];
          o[dt * 4 + 3] *= alpha[1];
        }
      }
    };
    auto pack = [&]() {
#pragma unroll
      for (int kk = 0; kk < KN; ++kk) {
        pf[kk][0] = pack_bf16(s[(2 * kk) * 4 + 0], s[(2 * kk) * 4 + 1]);
        pf[kk][1] = pack_bf16(s[(2 * kk) * 4 + 2], s[(2 * kk) * 4 + 3]);
        pf[kk][2] = pack_bf16(s[(2 * kk + 1) * 4 + 0], s[(2 * kk + 1) * 4 + 1]);
        pf[kk][3] = pack_bf16(s[(2 * kk + 1) * 4 + 2], s[(2 * kk + 1) * 4 + 3]);
      }
    };

    // wg_idle_rows=skip: a consumer warpgroup whose 64 query rows all lie past the tile's rows (a
    // decode tile holds at most 64 packed rows, so the second warpgroup of every decode tile; a
    // ragged call's last tile) issues no wgmma and runs no softmax: a loop of its own, so that the
    // computing loops stay as they are (wgmma inside a branch of theirs made ptxas serialize them,
    // C7514). It takes the same turns (the other warpgroup's turns wait for its arrivals), waits for
    // each block's full barrier before it releases the block (an arrival before the fill could count
    // toward the slot's previous phase), releases its Q buffer, and its epilogue stores nothing, as
    // before (its rows are past the tile's).
    const bool idle = kWgIdleSkip && m0 + c * 64 >= sc.mtotal;
    if (idle) {
      auto filled = [&](uint32_t bar, int j) { mbar_wait(bar, ((gb + uint32_t(j)) / S) & 1u); };
      if constexpr (kWgOverlap) {
        for (int j = 0; j < nb + (nb > 0); ++j) {  // turn j: S of block j, P V of block j - 1
          turn_wait();
          turn_pass();
          if (j < nb) {
            filled(k_full(slot(j)), j);
            release_kv(k_empty(kslot(j)));
            if (j == nb - 1) release_q();
          }
          if (j > 0) {
            filled(v_full(slot(j - 1)), j - 1);
            release_kv(v_empty(slot(j - 1)));
          }
        }
      } else {
        for (int j = 0; j < nb; ++j) {  // two turns a block: S, then P V
          turn_wait();
          turn_pass();
          filled(k_full(slot(j)), j);
          release_kv(k_empty(kslot(j)));
          if (j == nb - 1) release_q();
          turn_wait();
          turn_pass();
          filled(v_full(slot(j)), j);
          release_kv(v_empty(slot(j)));
        }
      }
    } else if constexpr (kWgOverlap) {
      // Softmax of block j runs while the tensor cores do P V of block j - 1: issue S(j) and
      // PV(j - 1), wait for S(j) only, softmax, then wait for PV(j - 1) and rescale O.
      if (nb > 0) {
        float alpha[2];
        bool any;
        wait_k(0);
        turn_wait();
        issue_qk(0);
        turn_pass();
        wg_wait0();
        wg_fence_regs(s);
        release_kv(k_empty(kslot(0)));
        if (nb == 1) release_q();
        softmax_any(0, alpha, any, pf, [] {});  // no P V in flight yet
        if constexpr (kTwoP) {
          // wg_p_buffers=2: block j's softmax packs into the set P V of block j - 1 does not read
          auto step = [&](int j, uint32_t (&pn)[KN][4], const uint32_t (&pp)[KN][4]) {
            turn_wait();
            issue_qk(j);
            issue_pv(j - 1, pp);
            turn_pass();
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            wg_fence_regs(s);
            release_kv(k_empty(kslot(j)));
            if (j == nb - 1) release_q();
            softmax_any(j, alpha, any, pn, [] {});
            wg_wait0();
            wg_fence_regs(o);
            release_kv(v_empty(slot(j - 1)));
            rescale(alpha, any);
          };
          for (int j = 1; j < nb; j += 2) {  // odd blocks' P in pg, even blocks' in pf
            step(j, pg, pf);
            if (j + 1 == nb) break;
            step(j + 1, pf, pg);
          }
          turn_wait();
          if ((nb - 1) & 1) {
            issue_pv(nb - 1, pg);
          } else {
            issue_pv(nb - 1, pf);
          }
          turn_pass();
        } else {
          pack();
          for (int j = 1; j < nb; ++j) {
            wait_k(j);
            turn_wait();
            issue_qk(j);
            issue_pv(j - 1, pf);
            turn_pass();
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            wg_fence_regs(s);
            release_kv(k_empty(kslot(j)));
            if (j == nb - 1) release_q();
            // wg_v_release: P V of block j - 1 waited for and its V stage released before block j's
            // softmax (before_softmax), between its two rows (mid_softmax) or after it (after_softmax).
            // Written out three times: a shared lambda renumbers the PTX's registers.
            if constexpr (kWgVRelease == 2) {
              wg_wait0();
              wg_fence_regs(o);
              release_kv(v_empty(slot(j - 1)));
            }
            softmax_any(j, alpha, any, pf, [&] {
              if constexpr (kWgVRelease == 1) {
                wg_fence_regs(s);  // the first row's probabilities first (else the wait moves up)
                // a probe of V's full barrier (passed already: its next fill waits for this release)
                // ends ptxas's basic block, which would otherwise hoist the wait above the first row
                mbar_wait(v_full(slot(j - 1)), ((gb + uint32_t(j - 1)) / S) & 1u);
                wg_wait0();
                wg_fence_regs(o);
                release_kv(v_empty(slot(j - 1)));
              }
            });
            if constexpr (kWgVRelease == 0) {
              wg_wait0();
              wg_fence_regs(o);
              release_kv(v_empty(slot(j - 1)));
            }
            rescale(alpha, any);
            pack();
          }
          turn_wait();
          issue_pv(nb - 1, pf);
          turn_pass();
        }
        wg_wait0();
        wg_fence_regs(o);
        release_kv(v_empty(slot(nb - 1)));
      }
    } else {
      for (int j = 0; j < nb; ++j) {
        float alpha[2];
        bool any;
        wait_k(j);
        turn_wait();
        issue_qk(j);
        turn_pass();
        wg_wait0();
        wg_fence_regs(s);
        release_kv(k_empty(kslot(j)));
        if (j == nb - 1) release_q();
        softmax_any(j, alpha, any, pf, [] {});
        rescale(alpha, any);
        if constexpr (!kTwoP) pack();  // wg_p_buffers=2: packed in the softmax (no P V in flight)
        turn_wait();
        issue_pv(j, pf);
        turn_pass();
        wg_wait0();
        wg_fence_regs(o);
        release_kv(v_empty(slot(j)));
      }
    }

    // Epilogue: row sums across the quad, then bf16 output (or fp32 split partials).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      l_run[h] = l;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + c * 64 + w * 16 + g + 8 * h;
      if (r >= sc.mtotal) continue;
      const int qi = kWgTilePublish && sc.gp == 1 ? r : r / sc.gp;
      const int hq = hbase + (kWgTilePublish ? r - qi * sc.gp : r % sc.gp);
      if (sc.splits == 1) {
        const float inv = l_run[h] > 0.f ? 1.f / l_run[h] : 0.f;
        if (stage_o) {  // into this warpgroup's rows of the Q buffer, as the producer lays Q out
          const int R = c * 64 + w * 16 + g + 8 * h;
#pragma unroll
          for (int dt = 0; dt < DT; ++dt)
            sts_b32(q_cur + 2u * uint32_t(sw_off<BM>(R, dt)) + 4u * uint32_t(t4),
                    pack_bf16(o[dt * 4 + 2 * h] * inv, o[dt * 4 + 2 * h + 1] * inv));
          continue;
        }
        __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + id.batch * a.o_batch_stride +
                              hq * a.o_head_stride + (long long)qi * a.o_row_stride;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
          *reinterpret_cast<__nv_bfloat162*>(orow + dt * 8 + 2 * t4) =
              __floats2bfloat162_rn(o[dt * 4 + 2 * h] * inv, o[dt * 4 + 2 * h + 1] * inv);
      } else {
        const long long row_id = ((long long)id.batch * a.heads_q + hq) * sq + qi;
        const long long rows = (long long)a.batch * a.heads_q * sq;
        const long long wi = (long long)id.split * rows + row_id;
        float2* wo = reinterpret_cast<float2*>(sc.ws_o) + wi * (D / 2);
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) wo[dt * 4 + t4] = make_float2(o[dt * 4 + 2 * h], o[dt * 4 + 2 * h + 1]);
        if (t4 == 0) {
          const float mr = m_run[h];
          sc.ws_ml[wi] = make_float2(mr == neg_inf() ? neg_inf() : mr * sl2, l_run[h]);
        }
      }
    }
    if (kWgEpilogueTma && stage_o && kTma && maps.o_ok) {  // maps.o_ok: 0 where O has no map
      if constexpr (kWgEpilogueTma) {
        // wg_epilogue=tma: the copy engine stores the warpgroup's rows, then the Q buffer goes back
        fence_async_smem();  // this thread's rows, visible to the copy engine
        asm volatile("bar.sync %0, 128;\n" ::"r"(8 + c) : "memory");  // the warpgroup's rows are in
        if ((tid & 127) == 0) {
          const int q0 = (m0 + c * 64) / sc.gp;
#pragma unroll
          for (int p = 0; p < D / 64; ++p)
            tma_store_5d(&dependent<D>(maps).o, q_cur + uint32_t(p * BM * 128 + c * 64 * 128), p * 64, 0, q0,
                         id.head, id.batch);
          asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
          asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");  // the engine has read them
        }
        release_q_now();
      }
    } else if (stage_o) {
      // wg_epilogue=smem: the warpgroup's 64 rows go out in 16-byte chunks (a row's on consecutive
      // threads), then the Q buffer goes back to the producer
      asm volatile("bar.sync %0, 128;\n" ::"r"(8 + c) : "memory");  // the warpgroup's rows are in
      const int wt = tid & 127;
#pragma unroll
      for (int k = 0; k < CH / 2; ++k) {
        const int lr = (wt + 128 * k) / CH, ch = (wt + 128 * k) % CH;
        const int r = m0 + c * 64 + lr;
        if (r >= sc.mtotal) continue;
        const uint4 v = lds_b128(q_cur + 2u * uint32_t(sw_off<BM>(c * 64 + lr, ch)));
        const int qi = kWgTilePublish && sc.gp == 1 ? r : r / sc.gp;
        const int hq = hbase + (kWgTilePublish ? r - qi * sc.gp : r % sc.gp);
        __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + id.batch * a.o_batch_stride +
                              hq * a.o_head_stride + (long long)qi * a.o_row_stride;
        *reinterpret_cast<uint4*>(orow + ch * 8) = v;
      }
      fence_async_smem();  // these reads come before the producer's next copy into the buffer
      release_q_now();
    }
    gb += uint32_t(nb);
  }
  // wg_epilogue=tma: the last stores complete before the CTA ends
  if (kWgEpilogueTma && kTma && (tid & 127) == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  // Consumer 0 takes the turn consumer 1 passed last, so no arrival is left on a barrier.
  if constexpr (kWgPingpong && HC > 1) {
    if (c == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");
  }
}

template <int D>
int prepare_sm90() {
  static bool done = false;
  static cudaError_t status = cudaSuccess;
  if (!done) {
    status = cudaFuncSetAttribute(attn_fwd_sm90<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Sm90Cfg<D>::kSmem));
    done = true;
  }
  return status;
}

// Whether the wgmma kernel takes these args: a head group with more than kDecodeRows
// (packed) query rows; decode shapes stay on the mma.sync path, unless wg_decode=wgmma sends every
// call here (the mma.sync kernels stay in the file, unused; a call no tensor map describes takes the
// Hopper kernel's cp.async build).
template <int D>
bool use_sm90(const SocraticAttentionArgs* a, int gp) {
  if constexpr (kWgDecodeWgmma) {  // wg_decode=wgmma: decode shapes too
    (void)a;
    (void)gp;
    return kDecodeRows > 0;
  } else {
    return (long long)a->seqlen_q * gp > kDecodeRows;
  }
}

// wg_split_rule=balanced: the Hopper planner picks the split-KV count (1 up to the same cap) whose
// estimated makespan is least, instead of the smallest count that fills kSplitWaves waves. With one
// CTA per SM taking tiles in turn, a call lasts at least its heaviest tile, at least its work spread
// over the SMs, and, when its tiles take W rounds, about W - 1 of its lightest tiles plus the
// heaviest: 144 equal tiles on 132 SMs take two whole rounds, which the fill rule chose for a 16-tile
// chunked prefill (9 splits) where 8 splits take one. A tile costs its key blocks (as sm90_tile counts
// them) plus one block of fixed cost; more splits must be 2% better (their partials are written and
// combined).
//
// wg_split_cost=N (wg_split_rule=balanced): a plan with more than one split also pays for its fp32
// partials and the combine kernel (a second launch behind the first), charged as N key blocks on
// top of its makespan estimate. Without the charge the rule split the suite's ragged causal calls of
// ~128 tiles in two (9 -> 6.5 estimated blocks), where `wgmma-tma-g` measured 0.71-0.86x FA3; charged
// 8 blocks they run as one launch, 1.29-1.52x faster (stop 30; docs/family.md).
inline int balanced_splits(const SocraticAttentionArgs* a, const Sched& s, int bm, int bn, int most) {
  const int sk = a->seqlen_k, offset = a->seqlen_k - a->seqlen_q;
  long long sum = 0;  // key blocks over the m blocks of one (head, batch) unit
  int heavy = 0, light = 1 << 30;
  for (int mb = 0; mb < s.m_blocks; ++mb) {  // as sm90_tile counts them
    const int qi_last = (min((mb + 1) * bm, s.mtotal) - 1) / s.gp;
    int kv_hi = sk;
    if (kCausalSkip && a->causal) kv_hi = max(0, min(sk, qi_last + offset + 1));
    const int nb = (kv_hi + bn - 1) / bn;
    sum += nb;
    heavy = nb > heavy ? nb : heavy;
    light = nb < light ? nb : light;
  }
  const long long units = (long long)s.heads_grid * a->batch, sms = num_sms();
  const double fixed = 1.0;  // a tile's fixed cost, in key blocks
  const double combine = kWgSplitCost;  // wg_split_cost: a split plan's partials and combine, in key blocks
  double best = 0.0;
  int pick = 1;
  for (int n = 1; n <= most; ++n) {
    const double top = (heavy + n - 1) / n + fixed, low = light / n + fixed;
    const long long rounds = (units * s.m_blocks * n + sms - 1) / sms;
    const double spread = double(units) * (double(sum) + fixed * n * s.m_blocks) / double(sms);
    double est = top > spread ? top : spread;
    const double tail = double(rounds - 1) * low + top;
    est = est > tail ? est : tail;
    if constexpr (kWgSplitCost > 0) {
      if (n > 1) est += combine;
    }
    if (n == 1 || est < 0.98 * best) {
      best = est;
      pick = n;
    }
  }
  return pick;
}

template <int D>
Sched plan_sm90(const SocraticAttentionArgs* a, int gp) {
  using C = Sm90Cfg<D>;
  Sched s{};
  s.gp = gp;
  s.mtotal = a->seqlen_q * gp;
  s.m_blocks = (s.mtotal + C::BM - 1) / C::BM;
  s.heads_grid = gp > 1 ? a->heads_kv : a->heads_q;
  s.splits = 1;
  const long long base = (long long)s.m_blocks * s.heads_grid * a->batch;
  if constexpr (kSplitWaves > 0) {
    const long long target = (long long)kSplitWaves * num_sms();
    const int kv_blocks = (a->seqlen_k + C::BN - 1) / C::BN;
    if (base < target && kv_blocks >= 4) {
      if constexpr (kWgSplitBalanced) {  // wg_split_rule=balanced (split_rule.cuh)
        long long want = kv_blocks / 2;  // the most splits considered
        want = want < kMaxSplits ? want : kMaxSplits;
        s.splits = balanced_splits(a, s, C::BM, C::BN, int(want));
      } else {
        long long want = (target + base - 1) / base;
        want = want < kv_blocks / 2 ? want : kv_blocks / 2;
        want = want < kMaxSplits ? want : kMaxSplits;
        s.splits = want > 1 ? int(want) : 1;
      }
    }
  }
  s.tiles = int(base * s.splits);
  return s;
}

template <int D>
int launch_any(const SocraticAttentionArgs* a, cudaStream_t stream) {
  const int gp = pack_of<D>(a);
  if (!use_sm90<D>(a, gp)) return launch<D>(a, stream);
  const int err = prepare_sm90<D>();
  if (err != cudaSuccess) return err;
  Sched s = plan_sm90<D>(a, gp);
  if (s.splits > 1) {
    const unsigned long long need = workspace_for<D>(s, a);
    if (a->workspace == nullptr || a->workspace_bytes < need) {
      s.splits = 1;
      s.tiles = s.m_blocks * s.heads_grid * a->batch;
    } else {
      const unsigned long long rows = (unsigned long long)a->batch * a->heads_q * a->seqlen_q;
      s.ws_o = static_cast<float*>(a->workspace);
      s.ws_ml = reinterpret_cast<float2*>(static_cast<unsigned char*>(a->workspace) +
                                          (unsigned long long)s.splits * rows * D * 4);
    }
  }
  if constexpr (kWgL2Sections > 0) {  // wg_l2_sections: the K/V units of a section
    const int group = s.gp > 1 ? 1 : a->heads_q / a->heads_kv;  // grid heads that read one K/V head
    s.l2_units = l2_section_units(s, a->batch, a->seqlen_k, a->head_dim, group);
    // wg_full_order=m_fastest: a call without the causal mask has tiles of equal weight, so heavy first
    // has nothing to order; each section is then one K/V unit's group, which makes the m blocks fastest
    // (after the group's query heads): the tiles that read one K/V head run side by side in the same
    // wave and share its copy in L2, where sections of 32 MB spread them over several waves.
    if (kWgFullOrderM && !a->causal) s.l2_units = group;
  }
  if (s.tiles <= 0) return cudaSuccess;
  int grid = s.tiles;
  if constexpr (kPersistent) grid = grid < num_sms() ? grid : num_sms();
  attn_fwd_sm90<D><<<grid, Sm90Cfg<D>::kThreads, Sm90Cfg<D>::kSmem, stream>>>(*a, s);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if (s.splits > 1) {
    if (const cudaError_t ce = launch_combine<D, kCombinePdl>(a, s, stream); ce != cudaSuccess) return ce;
    e = cudaGetLastError();
  }
  return e;
}

template <int D>
unsigned long long workspace_any(const SocraticAttentionArgs* a) {
  const int gp = pack_of<D>(a);
  if (!use_sm90<D>(a, gp)) return workspace<D>(a);
  const Sched s = plan_sm90<D>(a, gp);
  const unsigned long long need = workspace_for<D>(s, a);
  // wg_scheduler=dynamic: the tile counter, 16-byte aligned after the split partials
  if (kWgDynamic && a->causal && s.tiles > num_sms()) return ((need + 15ull) & ~15ull) + 16;
  return need;
}

bool aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15) == 0; }

int check_args(const SocraticAttentionArgs* a) {
  if (a->batch <= 0 || a->seqlen_q <= 0 || a->seqlen_k <= 0 || a->heads_q <= 0 || a->heads_kv <= 0 ||
      a->heads_q % a->heads_kv != 0)
    return cudaErrorInvalidValue;
  const long long strides[] = {a->q_batch_stride, a->q_row_stride, a->q_head_stride, a->k_batch_stride,
                               a->k_row_stride,   a->k_head_stride, a->v_batch_stride, a->v_row_stride,
                               a->v_head_stride,  a->o_batch_stride, a->o_row_stride, a->o_head_stride};
  for (long long s : strides)
    if (s % 8 != 0) return cudaErrorNotSupported;
  if (!aligned16(a->q) || !aligned16(a->k) || !aligned16(a->v) || !aligned16(a->o)) return cudaErrorNotSupported;
  if (a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256) return cudaErrorNotSupported;
  return cudaSuccess;
}

}  // namespace fam

extern "C" int socratic_attention_forward(const SocraticAttentionArgs* a, cudaStream_t stream) {
  const int err = fam::check_args(a);
  if (err != cudaSuccess) return err;
  switch (a->head_dim) {
    case 64: return fam::launch_any<64>(a, stream);
    case 128: return fam::launch_any<128>(a, stream);
    default: return fam::launch_any<256>(a, stream);
  }
}

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs* a) {
  if (fam::check_args(a) != cudaSuccess) return 0;
  switch (a->head_dim) {
    case 64: return fam::workspace_any<64>(a);
    case 128: return fam::workspace_any<128>(a);
    default: return fam::workspace_any<256>(a);
  }
}
