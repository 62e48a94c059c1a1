"""The default scenario suite: composition, names, hidden part, FLOP and byte model."""

from __future__ import annotations

from collections import Counter

import pytest

from harness.attention.forward import attention_flops, attention_min_bytes
from harness.attention.suite import default_suite
from harness.scenario import Scenario, causal_visible_pairs
from harness.suite import select


def test_suite_has_182_scenarios_with_unique_stable_names() -> None:
    suite = default_suite()
    assert len(suite) == 182
    assert len({s.name for s in suite}) == 182
    assert [s.name for s in default_suite()] == [s.name for s in suite]
    assert suite[0].name == "prefill-d64-s512-b32-h32-full"


def test_suite_covers_every_category_and_head_dim() -> None:
    suite = default_suite()
    assert Counter(s.category for s in suite) == {
        "prefill": 36, "gqa": 51, "chunked": 32, "decode": 33, "ragged": 30,
    }
    assert {s.head_dim for s in suite} == {64, 128, 256}
    assert any(s.heads_q // s.heads_kv == 16 for s in suite)  # 8/1 down to 16/1 groups
    assert any(s.seqlen_q <= 4 for s in suite)  # decode
    assert any(s.causal and s.seqlen_q != s.seqlen_k for s in suite)  # bottom-right
    assert any(s.seqlen_q % 64 and s.seqlen_k % 64 for s in suite)  # ragged


def test_square_prefill_follows_the_fa3_grid() -> None:
    for s in (s for s in default_suite() if s.category == "prefill"):
        assert s.batch * s.seqlen_q == 16384
        assert s.heads_q * s.head_dim == 2048
        assert s.seqlen_q == s.seqlen_k


def test_about_a_quarter_of_each_category_is_hidden() -> None:
    suite = default_suite()
    hidden = [s for s in suite if s.hidden]
    assert 0.22 <= len(hidden) / len(suite) <= 0.28
    for cat in {s.category for s in suite}:
        in_cat = [s for s in suite if s.category == cat]
        assert 0.2 <= sum(s.hidden for s in in_cat) / len(in_cat) <= 0.3


def test_every_causal_scenario_gives_every_query_a_key() -> None:
    for s in default_suite():
        if s.causal:
            assert s.seqlen_k >= s.seqlen_q, s.name


def _naive_pairs(sq: int, sk: int) -> int:
    return sum(1 for i in range(sq) for j in range(sk) if j <= i + sk - sq)


@pytest.mark.parametrize("sq,sk", [(1, 1), (4, 4), (3, 10), (10, 3), (77, 77), (1, 1000), (113, 203), (239, 1)])
def test_causal_visible_pairs_matches_counting(sq: int, sk: int) -> None:
    assert causal_visible_pairs(sq, sk) == _naive_pairs(sq, sk)


def test_flops_count_only_visible_pairs() -> None:
    full = Scenario("a", "x", 2, 128, 128, 8, 2, 64, causal=False)
    causal = Scenario("b", "x", 2, 128, 128, 8, 2, 64, causal=True)
    assert attention_flops(full) == 4 * 2 * 8 * 128 * 128 * 64
    assert attention_flops(causal) == 4 * 2 * 8 * (128 * 129 // 2) * 64
    assert attention_min_bytes(full) == 2 * (2 * 2 * 128 * 8 * 64 + 2 * 2 * 128 * 2 * 64)


def test_gqa_heads_must_divide() -> None:
    with pytest.raises(ValueError, match="multiple"):
        Scenario("bad", "x", 1, 8, 8, 6, 4, 64, causal=False)


def test_select_parts_and_filters() -> None:
    suite = default_suite()
    assert len(select(suite, "visible")) + len(select(suite, "hidden")) == 182
    dec = select(suite, "all", "category=decode,head_dim=256")
    assert dec and all(s.category == "decode" and s.head_dim == 256 for s in dec)
    assert {s.name for s in select(suite, "all", "ragged-d64*")} == {
        s.name for s in suite if s.name.startswith("ragged-d64")
    }
    assert all("llama3-70b" in s.name for s in select(suite, "all", "llama3-70b"))
    assert all(s.causal for s in select(suite, "all", "causal=1"))
    with pytest.raises(ValueError, match="unknown scenario field"):
        select(suite, "all", "nope=1")
    with pytest.raises(ValueError, match="unknown suite part"):
        select(suite, "secret")
