"""Situations a profile recognises (harness/profile.py's finding codes) and the bank's questions
written for them, by key: the bank answers from the profile. A pause whose leader's profile
finds Hopper without HGMMA ranks the warpgroup MMA question first; one that finds decode far
from the copy bandwidth ranks the decode questions. Codes stay plain strings here: the bank
imports neither the harness nor the app. A curated bank keeps the keys it was loaded with; a
key with no active question is skipped."""

from __future__ import annotations

from collections.abc import Sequence

FINDING_QUESTIONS: dict[str, tuple[str, ...]] = {
    "no_wgmma_on_hopper": ("which-mma-instructions-issue",),
    "no_tensor_cores": ("which-mma-instructions-issue",),
    "no_tma_on_hopper": ("how-kv-tiles-reach-shared-memory", "roles-of-warps"),
    "spills": ("registers-spills-occupancy",),
    "local_memory": ("registers-spills-occupancy",),
    "decode_far_from_bandwidth": ("decode-bandwidth-fraction", "decode-sms-busy"),
    "causal_no_skip": ("fully-masked-tiles", "causal-ideal-ratio"),
    "low_tensor_core_share": ("what-bounds-the-kernel-now", "mma-and-softmax-overlap"),
    "low_l2_hit_rate": ("cta-order-and-l2-reuse", "what-l2-is-told-about-reuse"),
    "loop_below_roofline": ("exponentials-versus-mma-rate", "rescale-frequency", "work-between-mma-and-exp"),
    "causal_imbalance": ("causal-tail-of-grid", "gap-between-tiles-on-an-sm", "mask-arithmetic-on-every-tile"),
    "tile_edges": ("what-a-short-call-pays-for", "next-tile-in-flight", "output-tile-store"),
    "small_head_dim_lags": ("tile-shape-for-each-head-dim", "rows-each-warpgroup-holds"),
    # a category behind its strongest peer where no finding is about it alone (harness/profile.py)
    "chunked_behind_peer": ("split-pays-for-its-combine", "waves-and-last-wave", "what-peer-does-differently"),
    "gqa_behind_peer": ("causal-tail-of-grid", "gap-between-tiles-on-an-sm", "what-peer-does-differently"),
    "prefill_behind_peer": ("cta-order-and-l2-reuse", "gap-between-tiles-on-an-sm", "what-peer-does-differently"),
    "decode_behind_peer": ("decode-sms-busy", "decode-bandwidth-fraction", "what-peer-does-differently"),
}


def matched_keys(findings: Sequence[str]) -> dict[str, tuple[int, str]]:
    """question key -> (rank of the first finding that names it, that finding's code)."""
    out: dict[str, tuple[int, str]] = {}
    for rank, code in enumerate(findings):
        for key in FINDING_QUESTIONS.get(code, ()):
            out.setdefault(key, (rank, code))
    return out
