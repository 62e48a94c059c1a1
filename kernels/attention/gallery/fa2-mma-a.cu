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
//    "persistent": false,
//    "split_kv": "1wave",
//    "pack_gqa": "decode",
//    "causal_skip": true,
//    "mask_split": true
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
constexpr bool kPersistent = false;
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
    case 64: return fam::launch<64>(a, stream);
    case 128: return fam::launch<128>(a, stream);
    default: return fam::launch<256>(a, stream);
  }
}

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs* a) {
  if (fam::check_args(a) != cudaSuccess) return 0;
  switch (a->head_dim) {
    case 64: return fam::workspace<64>(a);
    case 128: return fam::workspace<128>(a);
    default: return fam::workspace<256>(a);
  }
}
