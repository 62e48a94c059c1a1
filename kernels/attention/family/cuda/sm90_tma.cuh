// ---------------------------------------------------------------------------------------
// wg_load=tma: the copy engine fills the tiles. The host encodes three tensor maps per call
// from the call's pointers and strides (cuTensorMapEncodeTiled, the one driver function the
// harness provides); they reach the kernel by value as a __grid_constant__ parameter. One
// producer thread issues cp.async.bulk.tensor per 64-column panel into the same 128-byte
// swizzled layout the cp.async path writes; each full barrier expects the tile's bytes.
// Rows past seqlen_q / seqlen_k are zero-filled by the copy engine (no out-of-range reads).
// Calls whose layout a tensor map cannot describe (a stride or pointer not 16-byte aligned, a
// GQA pack that does not divide the query tile) run the cp.async instantiation instead.
// ---------------------------------------------------------------------------------------
// wg_l2_hint (wg_load=tma): the copy engine's loads carry an L2 eviction policy (PTX createpolicy,
// the .L2::cache_hint operand of cp.async.bulk.tensor). kv_last: K and V, which every query tile of
// a head (and every head of a GQA group) reads again, are evicted last; kv_last_q_first: Q, read
// once per tile, also evicted first. The load helpers carry it, so every K/V (and Q) copy of the
// producer does, the cluster's multicast copies included.
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// The kernel's tensor maps, written out per form: wg_epilogue=tma (kWgEpilogueTma) adds O's map, and
// every other setting keeps the parameter's size and offsets without it.
template <bool kO>
struct Sm90MapsOf {
  CUtensorMap q;  // 5D {head_dim, heads in a pack, seqlen_q, packs, batch}
  CUtensorMap k;  // 4D {head_dim, seqlen_k, heads_kv, batch}
  CUtensorMap v;
  static constexpr int o_ok = 0;  // no O map
};
template <>
struct Sm90MapsOf<true> {
  CUtensorMap q;
  CUtensorMap k;
  CUtensorMap v;
  CUtensorMap o;  // wg_epilogue=tma: as q, a box of one consumer warpgroup's 64 rows
  int o_ok;       // whether o describes the call (else the threads store O)
};
using Sm90Maps = Sm90MapsOf<kWgEpilogueTma>;

__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
  if constexpr (kWgL2HintKv) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
        "{%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar),
        "l"(l2_policy_evict_last())
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                            int c1, int c2, int c3, int c4) {
  if constexpr (kWgL2HintQ) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
        "{%2, %3, %4, %5, %6}], [%7], %8;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar),
        "l"(l2_policy_evict_first())
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5, %6}], [%7];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
        : "memory");
  }
}

// wg_cluster=2: a K/V panel copied into both CTAs of the cluster (multicast; cluster_rank and
// mbar_arrive_peer are in the Hopper kernel's part, which the cp.async-only build has too).
__device__ __forceinline__ void tma_load_4d_mc(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                               int c1, int c2, int c3, uint16_t mask) {
  if constexpr (kWgL2HintKv) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        ".L2::cache_hint [%0], [%1, {%2, %3, %4, %5}], [%6], %7, %8;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask),
        "l"(l2_policy_evict_last())
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask)
        : "memory");
  }
}
template <int kCl>
__device__ __forceinline__ void kv_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                        int c2, int c3) {
  if constexpr (kCl > 1) {
    tma_load_4d_mc(dst, map, bar, c0, c1, c2, c3, uint16_t((1u << kCl) - 1u));
  } else {
    tma_load_4d(dst, map, bar, c0, c1, c2, c3);
  }
}

// wg_epilogue=tma: the copy engine stores a box of O from shared memory.
__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2,
                                             int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], "
               "[%6];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(src)
               : "memory");
}

// The producer of wg_load=tma: one thread walks the same tiles and key blocks as the consumers
// and keeps the Q buffer and the K/V stage ring full.
// wg_kv_order=k_ahead: it copies block j + 1's K before block j's V, the order the consumers need
// them in with wg_overlap (S of block j + 1 is issued before P V of block j), so the next S's copy
// is not queued behind a V the consumers need later. K and V keep their own full/empty barriers,
// so only the order of the waits and copies moves. K(j + 1) waits for K(j + 1 - S)'s release,
// which the consumers give after S of that block, and needs nothing issued after it: no wait cycle.
template <int D, int kCl = 1>
__device__ __forceinline__ void sm90_produce_tma(const SocraticAttentionArgs& a, const Sched& sc,
                                                 const Sm90Maps& maps, uint32_t q_s, uint32_t k_s,
                                                 uint32_t v_s, uint32_t bars) {
  using C = Sm90Cfg<D>;
  constexpr int BM = C::BM, BN = C::BN, S = C::S, SK = C::SK, P = D / 64;
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&maps.q)) : "memory");
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&maps.k)) : "memory");
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&maps.v)) : "memory");
  const int step = kPersistent ? int(gridDim.x) : sc.tiles;
  const int rank = kCl > 1 ? cluster_rank() : 0;  // wg_cluster: this CTA copies panels rank, rank + kCl, ...
  uint32_t gb = 0;  // K/V blocks loaded so far (stage ring position)
  int tc = 0;       // tiles so far (Q buffer phase)
  const bool dyn = kWgDynamic && sc.tile_counter != nullptr;  // wg_scheduler=dynamic on this call
  for (int tile = blockIdx.x; tile < sc.tiles; tile += kWgDynamic ? 0 : step, ++tc) {
    const Sm90Tile x = sm90_tile<BM, BN>(tile, a, sc);
    if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);
    const uint32_t q_full = q_full_bar(bars, tc, C::QS, S);
    if constexpr (kWgTilePublish) tile_publish(bars + 8 * C::kBars + C::kSlot * (tc & 1), tile, x);  // wg_tile_decode=producer
    else if (dyn) slot_store(bars + 8 * C::kBars + C::kSlot * (tc & 1), tile);  // published by the arrival below
    const uint32_t q_cur = q_s + uint32_t(tc % C::QS) * C::kQBytes;  // this tile's Q buffer
    mbar_expect_tx(q_full, C::kQBytes);
#pragma unroll
    for (int p = 0; p < P; ++p)
      tma_load_5d(q_cur + p * BM * 128, &maps.q, q_full, p * 64, 0, x.m0 / sc.gp, x.id.head, x.id.batch);
    if constexpr (kWgKAhead) {
      // wg_kv_order=k_ahead: K of block j + 1, then V of block j (block kb's stage: kb % S).
      for (int kb = 0, vb = 0; vb < x.nb;) {
        const bool is_k = kb < x.nb && kb <= vb + 1;
        const int j = is_k ? kb++ : vb++;
        const uint32_t gj = gb + uint32_t(j);
        const uint32_t R = is_k ? uint32_t(SK) : uint32_t(S);  // wg_v_ring=deeper: this copy's ring
        const int st = int(is_k ? gj % SK : gj % S);
        const uint32_t ph = (is_k ? gj / SK : gj / S) & 1u;
        const int n0 = (x.b_lo + j) * BN;
        const uint32_t full = bars + 8 * (2 + (is_k ? 0 : S) + st), empty = bars + 8 * (2 + (is_k ? 2 : 3) * S + st);
        if (gj >= R) mbar_wait(empty, ph ^ 1u);
        mbar_expect_tx(full, C::kKVBytes);
        const uint32_t dst = (is_k ? k_s : v_s) + st * C::kKVBytes;
        const CUtensorMap* map = is_k ? &maps.k : &maps.v;
#pragma unroll
        for (int p = rank; p < P; p += kCl) kv_load<kCl>(dst + p * BN * 128, map, full, p * 64, n0, x.kv_head, x.id.batch);
      }
    } else {
      for (int j = 0; j < x.nb; ++j) {
        const uint32_t gj = gb + uint32_t(j);
        const int st = int(gj % S);
        const uint32_t ph = (gj / S) & 1u;
        const int n0 = (x.b_lo + j) * BN;
        const uint32_t k_full = bars + 8 * (2 + st), v_full = bars + 8 * (2 + S + st);
        const uint32_t k_empty = bars + 8 * (2 + 2 * S + st), v_empty = bars + 8 * (2 + 3 * S + st);
        if (gj >= uint32_t(S)) mbar_wait(k_empty, ph ^ 1u);
        mbar_expect_tx(k_full, C::kKVBytes);
#pragma unroll
        for (int p = rank; p < P; p += kCl)
          kv_load<kCl>(k_s + st * C::kKVBytes + p * BN * 128, &maps.k, k_full, p * 64, n0, x.kv_head, x.id.batch);
        if (gj >= uint32_t(S)) mbar_wait(v_empty, ph ^ 1u);
        mbar_expect_tx(v_full, C::kKVBytes);
#pragma unroll
        for (int p = rank; p < P; p += kCl)
          kv_load<kCl>(v_s + st * C::kKVBytes + p * BN * 128, &maps.v, v_full, p * 64, n0, x.kv_head, x.id.batch);
      }
    }
    gb += uint32_t(x.nb);
    if constexpr (kWgDynamic) {
      // the next tile: round robin, or (dynamic) the next in heavy-first order, claimed now that
      // this CTA's loads of this one are issued. The shuffle from lane 0 (the one thread here) marks
      // the index warp-uniform, so the copies' coordinates stay in uniform registers (without it
      // ptxas moves them per thread and spills the producer's registers).
      tile = dyn ? __shfl_sync(1u, int(min(atomicAdd(sc.tile_counter, 1u) + gridDim.x, unsigned(sc.tiles))), 0)
                 : tile + step;
    }
  }
  // no tile left (with wg_tile_decode=producer, in either order): the consumers read the end from the
  // slot, no copy arrives
  if (kWgTilePublish || dyn) {
    if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);
    slot_store(bars + 8 * C::kBars + C::kSlot * (tc & 1), sc.tiles);
    mbar_arrive(q_full_bar(bars, tc, C::QS, S));
  }
  if constexpr (kCl > 1) {  // wg_cluster: every stage's last fill released by both CTAs' consumers
    for (int st = 0; st < S; ++st) {
      if (gb <= uint32_t(st)) continue;
      const uint32_t last = uint32_t(st) + uint32_t(S) * ((gb - 1u - uint32_t(st)) / uint32_t(S));
      mbar_wait(bars + 8 * (2 + 2 * S + st), (last / S) & 1u);
      mbar_wait(bars + 8 * (2 + 3 * S + st), (last / S) & 1u);
    }
  }
}

