"""The counter-based generator of the timed calls' fresh inputs (harness/attention/fresh_fill.py):
its hash is SplitMix64's, any rows made again equal the same rows of the whole tensor, strides
do not change the values, the distributions are the ones fresh.py names, and its CUDA source
builds with the three entry points the worker loads. tests/gpu/test_fresh_fill_gpu.py compares
the kernels with these torch operations on the GPU."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
import torch

from harness.attention.fresh_fill import (
    DISTS,
    GOLDEN,
    KINDS,
    SOURCE,
    CallTable,
    Logical,
    for_device,
    mix64,
    stream_key,
)

CPU = torch.device("cpu")
FILL = for_device(CPU)
SHAPE = Logical(2, 37, 3, 64)


def test_the_hash_is_splitmix64() -> None:
    # SplitMix64 seeded with 0: its first output is mix64(golden), 0xE220A8397B1DCDAF (the
    # reference implementation's published first value); the next ones agree with numpy's
    # wrapping uint64 arithmetic.
    first = int(mix64(torch.tensor([GOLDEN - (1 << 64)], dtype=torch.int64))[0]) & ((1 << 64) - 1)
    assert first == 0xE220A8397B1DCDAF
    z = np.arange(1, 1000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for shift, mul in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            z = (z ^ (z >> np.uint64(shift))) * np.uint64(mul)
        z ^= z >> np.uint64(31)
    got = mix64(torch.from_numpy((np.arange(1, 1000, dtype=np.uint64) * np.uint64(GOLDEN)).view(np.int64)))
    assert np.array_equal(got.numpy().view(np.uint64), z)


@pytest.mark.parametrize("seqlen", [37, 1])  # 1: a ragged scenario's single key
@pytest.mark.parametrize("dist", list(DISTS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_rows_made_again_are_the_rows_of_the_whole_tensor(kind: str, dist: str, seqlen: int) -> None:
    shape = Logical(SHAPE.B, seqlen, SHAPE.H, SHAPE.D)
    nonces = [7, 2**61 + 12345, 99]
    whole = [FILL.full(shape, n, kind, dist, CPU) for n in nonces]
    calls = CallTable.from_columns(torch.tensor(
        [CallTable.columns(n, dist, w) for n, w in zip(nonces, whole, strict=True)], dtype=torch.int64))
    # single rows (call, b, s, h), in any order
    desc = torch.tensor([[2, 1, 36, 0], [0, 0, 0, 2], [1, 1, 17, 1], [0, 1, 5, 0]], dtype=torch.int64)
    desc[:, 2] %= seqlen
    rows = FILL.rows(desc, calls, shape, kind)
    for got, (c, b, s, h) in zip(rows, desc.tolist(), strict=True):
        assert torch.equal(got, whole[c][b, s, h])
    # whole (b, h) blocks
    blocks = FILL.blocks(desc, calls, shape, kind)
    assert blocks.shape == (4, seqlen, shape.D)
    for got, (c, b, _, h) in zip(blocks, desc.tolist(), strict=True):
        assert torch.equal(got, whole[c][b, :, h])
    # the kept outputs' rows
    taken = FILL.take(desc, calls, whole, shape)
    assert torch.equal(taken, rows)


def test_strided_destinations_get_the_values_of_the_contiguous_tensor() -> None:
    kv = torch.full((SHAPE.B, SHAPE.S, 2, SHAPE.H, SHAPE.D), float("nan"), dtype=torch.bfloat16)
    FILL.fill(kv[:, :, 0], SHAPE, 5, "k", "normal")
    FILL.fill(kv[:, :, 1], SHAPE, 5, "v", "normal")
    assert torch.equal(kv[:, :, 0], FILL.full(SHAPE, 5, "k", "normal", CPU))
    assert torch.equal(kv[:, :, 1], FILL.full(SHAPE, 5, "v", "normal", CPU))
    with pytest.raises(ValueError, match="into a bf16 tensor of shape"):  # never past its end
        FILL.fill(kv[:, :-1, 0], SHAPE, 5, "k", "normal")
    with pytest.raises(ValueError, match="even head_dim stored contiguously"):
        FILL.fill(torch.empty(2, 3, 4, 8, dtype=torch.bfloat16).transpose(-1, -2), Logical(2, 3, 8, 4),
                  1, "q", "normal")


def test_the_distributions_are_the_ones_the_timed_calls_draw() -> None:
    big = Logical(4, 256, 4, 128)  # 524,288 values
    def stats(kind: str, dist: str) -> tuple[float, float, float, float]:
        t = FILL.full(big, 11, kind, dist, CPU).float()
        return float(t.mean()), float(t.std()), float(t.min()), float(t.max())

    mean, std, lo, hi = stats("q", "normal")
    assert abs(mean) < 0.01 and abs(std - 1) < 0.01 and lo < -4.0 and hi > 4.0  # tails of a normal
    mean, std, _, _ = stats("k", "large-logits")
    assert abs(mean) < 0.04 and abs(std - 4) < 0.04
    mean, std, _, _ = stats("v", "large-logits")  # V stays normal + 0.5
    assert abs(mean - 0.5) < 0.01 and abs(std - 1) < 0.01
    mean, _, lo, hi = stats("q", "uniform-shifted")
    assert abs(mean - 0.25) < 0.01 and lo >= -0.75 and hi <= 1.25 and lo < -0.74 and hi > 1.24  # bf16 rounds
    mean, _, lo, hi = stats("v", "uniform-shifted")
    assert abs(mean - 1.0) < 0.01 and lo >= 0 and hi <= 2.0


def test_nonces_and_tensors_give_independent_values() -> None:
    a = FILL.full(SHAPE, 1, "q", "normal", CPU).float().flatten()
    for other in (FILL.full(SHAPE, 2, "q", "normal", CPU), FILL.full(SHAPE, 1, "k", "normal", CPU),
                  FILL.full(SHAPE, 1 + (1 << 40), "q", "normal", CPU)):
        corr = torch.corrcoef(torch.stack([a, other.float().flatten()]))[0, 1]
        assert abs(float(corr)) < 0.02
    # the two values of a pair (one hash) are not correlated either
    pairs = a.view(-1, 2)
    assert abs(float(torch.corrcoef(pairs.T)[0, 1])) < 0.02
    assert torch.equal(FILL.full(SHAPE, 1, "q", "normal", CPU), FILL.full(SHAPE, 1, "q", "normal", CPU))
    assert int(stream_key(1, KINDS["q"])) != int(stream_key(1, KINDS["k"]))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_cuda_source_builds_with_the_entry_points_the_worker_loads(tmp_path, monkeypatch) -> None:
    from harness.compile import compile_kernel

    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path))
    built = compile_kernel(SOURCE, arch="sm_90a")
    lib = ctypes.CDLL(str(built.library))  # loads without a GPU: nothing runs at load
    for name in ("socratic_fresh_fill", "socratic_fresh_rows", "socratic_take_rows"):
        assert hasattr(lib, name)
    assert "error" not in built.info.log.lower()
