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
