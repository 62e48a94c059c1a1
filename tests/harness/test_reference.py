"""The chunked fp32/bf16 reference against a naive formula, the passes it runs only where a row
needs them, and the correctness rule."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from harness.attention.reference import attention_reference, attention_rows_reference
from harness.correctness import check_output, tolerance
from tests.harness.recording import counting


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    scale: float) -> torch.Tensor:
    """Direct float64 formula, one (batch, head, query) at a time."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    out = torch.zeros(b, sq, hq, d, dtype=torch.float64)
    for bi in range(b):
        for h in range(hq):
            for i in range(sq):
                logits = []
                for j in range(sk):
                    if causal and j > i + sk - sq:
                        logits.append(-math.inf)
                    else:
                        logits.append(float(q[bi, i, h].double() @ k[bi, j, h // g].double()) * scale)
                t = torch.tensor(logits, dtype=torch.float64)
                p = torch.softmax(t, 0) if torch.isfinite(t).any() else torch.zeros_like(t)
                out[bi, i, h] = p @ v[bi, :, h // g].double()
    return out


@pytest.mark.parametrize(
    "b,sq,sk,hq,hkv,d,causal",
    [(1, 5, 5, 2, 2, 8, False), (2, 7, 11, 4, 2, 16, True), (1, 9, 3, 4, 1, 8, False),
     (1, 1, 13, 8, 2, 8, True), (2, 6, 6, 3, 1, 4, True)],
)
def test_reference_matches_naive_formula(b: int, sq: int, sk: int, hq: int, hkv: int, d: int,
                                         causal: bool) -> None:
    g = torch.Generator().manual_seed(sq * 31 + sk)
    q = torch.randn(b, sq, hq, d, generator=g).to(torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, generator=g).to(torch.bfloat16)
    v = torch.randn(b, sk, hkv, d, generator=g).to(torch.bfloat16)
    scale = d ** -0.5
    want = naive_attention(q, k, v, causal, scale)
    got = attention_reference(q, k, v, causal=causal, scale=scale)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5)
    # Chunking over queries must not change the answer.
    tiny = attention_reference(q, k, v, causal=causal, scale=scale, chunk_bytes=1)
    assert torch.allclose(tiny, got, atol=1e-6)
    lowp = attention_reference(q, k, v, causal=causal, scale=scale, compute_dtype=torch.bfloat16)
    assert lowp.dtype == torch.bfloat16
    assert (lowp.double() - want).abs().max() < 0.05


@pytest.mark.parametrize("causal", [False, True])
def test_batches_grouped_in_one_chunk_give_the_per_batch_answer(causal: bool) -> None:
    """Small shapes go several batches per matrix product; the answer must be the one computed
    one batch (and one query) at a time, for both compute dtypes."""
    g = torch.Generator().manual_seed(11)
    b, sq, sk, hq, hkv, d = 5, 3, 9, 4, 2, 8
    q = torch.randn(b, sq, hq, d, generator=g).to(torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, generator=g).to(torch.bfloat16)
    v = torch.randn(b, sk, hkv, d, generator=g).to(torch.bfloat16)
    one_batch = sq * hq * sk * 4 + 4 * hkv * sk * d * 4
    for dtype in (torch.float32, torch.bfloat16):
        alone = attention_reference(q, k, v, causal=causal, scale=0.3, compute_dtype=dtype,
                                    chunk_bytes=1)
        for batches in (2, 3, b):
            grouped = attention_reference(q, k, v, causal=causal, scale=0.3, compute_dtype=dtype,
                                          chunk_bytes=batches * one_batch)
            assert torch.allclose(grouped.float(), alone.float(), atol=1e-6, rtol=0)
    want = naive_attention(q, k, v, causal, 0.3)
    got = attention_reference(q, k, v, causal=causal, scale=0.3, chunk_bytes=2 * one_batch + 1)
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5)


def test_rows_that_see_no_key_are_zero() -> None:
    q = torch.ones(1, 4, 1, 8, dtype=torch.bfloat16)
    k = torch.ones(1, 2, 1, 8, dtype=torch.bfloat16)
    v = torch.ones(1, 2, 1, 8, dtype=torch.bfloat16)
    out = attention_reference(q, k, v, causal=True, scale=1.0)
    assert torch.equal(out[0, :2], torch.zeros(2, 1, 8))
    assert torch.allclose(out[0, 2:], torch.ones(2, 1, 8))


def _case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    q = torch.randn(1, 33, 2, 32, generator=g).to(torch.bfloat16)
    k = torch.randn(1, 40, 2, 32, generator=g).to(torch.bfloat16)
    v = torch.randn(1, 40, 2, 32, generator=g).to(torch.bfloat16)
    ref32 = attention_reference(q, k, v, causal=True, scale=32 ** -0.5)
    lowp = attention_reference(q, k, v, causal=True, scale=32 ** -0.5, compute_dtype=torch.bfloat16)
    return ref32, lowp, q


def test_tolerance_is_twice_the_bf16_error_plus_rounding() -> None:
    ref32, lowp, _ = _case()
    lowp_err = float((lowp.float() - ref32).abs().max())
    rounding = float((ref32.to(torch.bfloat16).float() - ref32).abs().max())
    assert tolerance(ref32, lowp) == pytest.approx(2 * lowp_err + rounding)


def test_bf16_rounded_exact_answer_passes() -> None:
    ref32, lowp, _ = _case()
    assert check_output(ref32.to(torch.bfloat16), ref32, lowp).ok


def test_output_just_past_the_tolerance_fails_with_location() -> None:
    ref32, lowp, _ = _case()
    out = ref32.clone()
    out[0, 5, 1, 3] += 3 * tolerance(ref32, lowp)
    chk = check_output(out.to(torch.bfloat16), ref32, lowp)
    assert not chk.ok
    assert "[b, s, h, d] = [0, 5, 1, 3]" in chk.reason


def test_unwritten_output_is_reported_as_poison() -> None:
    ref32, lowp, _ = _case()
    out = ref32.to(torch.bfloat16)
    out[0, 32:] = float("nan")
    chk = check_output(out, ref32, lowp)
    assert not chk.ok and "NaN (the poison value" in chk.reason and "[0, 32, 0, 0]" in chk.reason


def test_infinite_output_fails() -> None:
    ref32, lowp, _ = _case()
    out = ref32.to(torch.bfloat16)
    out[0, 0, 0, 0] = float("inf")
    assert "NaN/Inf" in check_output(out, ref32, lowp).reason


class _ScoreCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """The elements of every batched matrix product's output (scores and outputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if func.__name__.split(".")[0] == "bmm":
            self.elements += out.numel()
        return out


@pytest.mark.parametrize("sq,sk", [(1024, 1024), (1100, 1500), (1024, 700)])
def test_a_long_causal_sequence_computes_only_the_scores_its_blocks_see(sq: int, sk: int) -> None:
    """Cut into blocks of queries, each block leaves out the keys hidden from all its rows: the
    answer is the one of a single block over every key (the left-out probabilities are exactly
    0), for both compute dtypes, and a square shape computes ~5/8 of the scores. Rows that see
    no key (sk < sq) stay zeros."""
    g = torch.Generator().manual_seed(sq + sk)
    q = torch.randn(1, sq, 2, 16, generator=g).to(torch.bfloat16)
    k = torch.randn(1, sk, 1, 16, generator=g).to(torch.bfloat16)
    v = torch.randn(1, sk, 1, 16, generator=g).to(torch.bfloat16)
    for dtype in (torch.float32, torch.bfloat16):
        whole = _ScoreCounter()
        with whole:  # one block of every query over every key: the rows' keys are all there
            ref = attention_reference(q, k, v, causal=False, scale=0.25, compute_dtype=dtype)
        blocked = _ScoreCounter()
        with blocked:
            got = attention_reference(q, k, v, causal=True, scale=0.25, compute_dtype=dtype)
        # The causal answer of one block (the mask over all keys), by the rows reference.
        from harness.attention.reference import attention_rows_reference

        rows = torch.arange(sq).view(1, sq)
        kv = lambda t: t[0, :, 0].unsqueeze(0).expand(2, sk, 16)  # noqa: E731
        want = attention_rows_reference(
            q[0].permute(1, 0, 2), kv(k), kv(v), rows.expand(2, sq), causal=True, scale=0.25,
            seqlen_q=sq, compute_dtype=dtype,
        ).permute(1, 0, 2).unsqueeze(0)
        tol = 1e-6 if dtype == torch.float32 else 2e-2
        assert torch.allclose(got.float(), want.float(), atol=tol, rtol=0)
        if sk < sq:
            assert bool((got[:, : sq - sk] == 0).all())
        assert blocked.elements < whole.elements
        if sq == sk:
            scores = (blocked.elements - sq * 2 * 16) / (whole.elements - sq * 2 * 16)
            assert 0.6 <= scores <= 0.66
    del ref


# -- the passes of the reference: the mask and the NaN fix only where a row needs them -------


def _reference_ops(sq: int, sk: int, causal: bool) -> tuple[Counter[str], torch.Tensor]:
    torch.manual_seed(0)
    q = torch.randn(1, sq, 4, 32, dtype=torch.bfloat16)
    k = torch.randn(1, sk, 2, 32, dtype=torch.bfloat16)
    v = torch.randn(1, sk, 2, 32, dtype=torch.bfloat16)
    with counting() as ops:
        out = attention_reference(q, k, v, causal=causal, scale=0.2)
    return ops, out


def test_the_mask_and_the_nan_fix_run_only_where_a_row_needs_them() -> None:
    decode, _ = _reference_ops(1, 300, causal=True)  # one query sees every key
    assert decode["masked_fill_"] == 0 and decode["nan_to_num_"] == 0
    chunked, _ = _reference_ops(40, 300, causal=True)  # rows miss keys, every row sees one
    assert chunked["masked_fill_"] == 1 and chunked["nan_to_num_"] == 0
    blind, out = _reference_ops(50, 20, causal=True)  # the first 30 rows see no key
    assert blind["masked_fill_"] == 1 and blind["nan_to_num_"] == 1
    assert bool((out[:, :30] == 0).all()) and bool(out[:, 30:].abs().sum() > 0)


def test_the_fp32_reference_scales_q_not_the_scores_and_the_bf16_one_its_scores() -> None:
    torch.manual_seed(2)
    q = torch.randn(2, 40, 4, 32, dtype=torch.bfloat16)
    k = torch.randn(2, 300, 2, 32, dtype=torch.bfloat16)
    v = torch.randn(2, 300, 2, 32, dtype=torch.bfloat16)
    for dtype, on_q, on_scores in ((torch.float32, 1, 0), (torch.bfloat16, 0, 1)):
        with counting() as ops:
            attention_reference(q, k, v, causal=True, scale=0.2, compute_dtype=dtype)
        assert (ops["mul"], ops["mul_"]) == (on_q, on_scores)  # one chunk here
    # Scaling before the product moves the fp32 answer by rounding only.
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.repeat_interleave(2, dim=2).double()) * 0.2
    mask = torch.arange(300).view(1, 300) > torch.arange(40).view(40, 1) + 260
    want = torch.einsum("bhqk,bkhd->bqhd", scores.masked_fill(mask, -math.inf).softmax(-1),
                        v.repeat_interleave(2, dim=2).double())
    got = attention_reference(q, k, v, causal=True, scale=0.2)
    assert torch.allclose(got.double(), want, atol=1e-6, rtol=1e-6)


def test_rows_reference_skips_the_same_passes_and_agrees_with_the_full_one() -> None:
    torch.manual_seed(1)
    for sq, sk in ((1, 257), (33, 47)):
        q = torch.randn(1, sq, 4, 32, dtype=torch.bfloat16)
        k = torch.randn(1, sk, 2, 32, dtype=torch.bfloat16)
        v = torch.randn(1, sk, 2, 32, dtype=torch.bfloat16)
        full = attention_reference(q, k, v, causal=True, scale=0.3)
        queries = torch.arange(sq).view(1, sq)
        with counting() as ops:
            rows = attention_rows_reference(q[:, :, 0], k[:, :, 0], v[:, :, 0], queries, causal=True,
                                            scale=0.3, seqlen_q=sq)
        assert ops["masked_fill_"] == (1 if sq > 1 else 0) and ops["nan_to_num_"] == 0
        assert torch.allclose(rows[0], full[0, :, 0], atol=1e-6)
