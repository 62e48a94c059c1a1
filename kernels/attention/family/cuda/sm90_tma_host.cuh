// wg_l2_promotion (wg_load=tma): the L2 promotion of every tensor map the host encodes (Q, K, V, O).
// 256 (the template's): a copy's 128-byte request makes L2 fetch the 256 bytes around it; 128: the
// request's line only (CUTLASS's default, so FA3's); 0: no promotion. Why: Nsight Compute on
// decode-gemma2-9b-tp1-q4-b64-k8192 (stop 39) had both kernels at 96% of L2 throughput, this one
// moving 4.05 TB/s from DRAM with a 26% L2 hit rate and FA3 4.45 TB/s with 0.8%. The likeliest
// reading (not isolated further): the promoted halves are fetched ahead and then requested again by
// the next box of the block, so L2 does more work per DRAM byte; 128 gives +3% on decode.
constexpr CUtensorMapL2promotion kL2Promotion = kWgL2Promotion == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                               : kWgL2Promotion == 0  ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                                                      : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;

// The tensor maps of one call, encoded from its pointers and strides (so a strided layout, such
// as K and V interleaved in one buffer, gets its own strides); false when a map cannot describe
// the call, which then runs the cp.async instantiation.
template <int D>
bool sm90_maps(const SocraticAttentionArgs* a, int gp, Sm90Maps* m) {
  using C = Sm90Cfg<D>;
  if (a->head_dim != D || gp < 1 || C::BM % gp != 0 || a->heads_q % gp != 0 || a->seqlen_q <= 0 ||
      a->seqlen_k <= 0 || a->batch <= 0)
    return false;
  bool ok = ((reinterpret_cast<unsigned long long>(a->q) | reinterpret_cast<unsigned long long>(a->k) |
              reinterpret_cast<unsigned long long>(a->v)) & 15) == 0;
  // A stride in bytes; a dimension of extent 1 is never stepped, so any legal stride serves.
  auto stride = [&ok](long long elems, long long extent) -> cuuint64_t {
    if (extent == 1) return 16;
    const long long bytes = elems * 2;
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (1LL << 40)) ok = false;
    return cuuint64_t(bytes);
  };
  const cuuint64_t qd[5] = {cuuint64_t(D), cuuint64_t(gp), cuuint64_t(a->seqlen_q),
                            cuuint64_t(a->heads_q / gp), cuuint64_t(a->batch)};
  const cuuint64_t qs[4] = {stride(a->q_head_stride, gp), stride(a->q_row_stride, a->seqlen_q),
                            stride(a->q_head_stride * gp, a->heads_q / gp),
                            stride(a->q_batch_stride, a->batch)};
  const cuuint32_t qb[5] = {64, cuuint32_t(gp), cuuint32_t(C::BM / gp), 1, 1};
  const cuuint64_t kd[4] = {cuuint64_t(D), cuuint64_t(a->seqlen_k), cuuint64_t(a->heads_kv),
                            cuuint64_t(a->batch)};
  const cuuint64_t ks[3] = {stride(a->k_row_stride, a->seqlen_k), stride(a->k_head_stride, a->heads_kv),
                            stride(a->k_batch_stride, a->batch)};
  const cuuint64_t vs[3] = {stride(a->v_row_stride, a->seqlen_k), stride(a->v_head_stride, a->heads_kv),
                            stride(a->v_batch_stride, a->batch)};
  const cuuint32_t kb[4] = {64, cuuint32_t(C::BN), 1, 1};
  const cuuint32_t ones[5] = {1, 1, 1, 1, 1};
  if (!ok) return false;
  auto encode = [&](CUtensorMap* map, const void* base, cuuint32_t rank, const cuuint64_t* dims,
                    const cuuint64_t* strides, const cuuint32_t* box) {
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims,
                                  strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                  CU_TENSOR_MAP_SWIZZLE_128B, kL2Promotion,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  };
  if (!(encode(&m->q, a->q, 5, qd, qs, qb) && encode(&m->k, a->k, 4, kd, ks, kb) &&
        encode(&m->v, a->v, 4, kd, vs, kb)))
    return false;
  if constexpr (kWgEpilogueTma) {
    // wg_epilogue=tma: O's map when one describes it (the stride checks clear ok otherwise)
    const cuuint64_t os[4] = {stride(a->o_head_stride, gp), stride(a->o_row_stride, a->seqlen_q),
                              stride(a->o_head_stride * gp, a->heads_q / gp),
                              stride(a->o_batch_stride, a->batch)};
    const cuuint32_t ob[5] = {64, cuuint32_t(gp), cuuint32_t(64 / gp), 1, 1};
    auto* mo = dependent<D>(m);
    mo->o_ok = ok && 64 % gp == 0 && (reinterpret_cast<unsigned long long>(a->o) & 15) == 0;
    if (mo->o_ok) mo->o_ok = encode(&mo->o, a->o, 5, qd, os, ob);
  }
  return true;
}

// wg_p_long_blocks (wg_p_buffers=2): the two-register-set loop only in an instantiation of its own,
// kLong, that the host picks for a call of at least N key blocks per SM (every tile's blocks over
// the SMs, as the balanced split rule counts them; one d128 block of 128 x 128 is ~1.6 us of an SM
// at FA3's rate, so 64 is ~0.1 ms). Every other call, decode's solo instantiation included, runs a
// one-set kernel (kTwoP is false there, so its loop is the one-set file's). Why: stop 34 measured
// the second set 2-3% faster on long d128 calls and ~2 us slower on every short one (the larger
// code; docs/family.md), so one kernel for both lost 0.5% overall.
// wg_p_long_blocks: whether a call is long enough for the two-register-set instantiation (kLong):
// its key blocks over every tile, per SM, at least kPLongBlocks. Only head dims with two sets.
template <int D>
bool long_call(const SocraticAttentionArgs* a, const Sched& s) {
  if constexpr (D < 128) {
    (void)a;
    (void)s;
    return false;
  } else {
    using C = Sm90Cfg<D>;
    const int sk = a->seqlen_k, offset = a->seqlen_k - a->seqlen_q;
    long long sum = 0;  // key blocks over the m blocks of one (head, batch) unit
    for (int mb = 0; mb < s.m_blocks; ++mb) {  // as sm90_tile counts them
      const int qi_last = (min((mb + 1) * C::BM, s.mtotal) - 1) / s.gp;
      int kv_hi = sk;
      if (kCausalSkip && a->causal) kv_hi = max(0, min(sk, qi_last + offset + 1));
      sum += (kv_hi + C::BN - 1) / C::BN;
    }
    return sum * s.heads_grid * a->batch >= (long long)kPLongBlocks * num_sms();
  }
}

