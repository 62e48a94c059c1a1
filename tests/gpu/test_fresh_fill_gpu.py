"""The harness's fresh-input kernels on the GPU (harness/attention/fresh_fill.cu): they load, they
write what the torch definition (fresh_fill.values) says, rows and blocks they make again equal the
same rows of the tensor they filled bit for bit (the check of the timed outputs depends on it), on
every layout a trial has, and a fill is not slower than torch's own random draws it replaced."""

from __future__ import annotations

import pytest
import torch

from harness.attention.fresh_fill import DISTS, KINDS, CallTable, FreshFill, Logical, for_device

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

DEV = torch.device("cuda")
SHAPES = [Logical(2, 333, 5, 64), Logical(1, 1031, 2, 128), Logical(3, 17, 4, 256), Logical(4, 1, 2, 128)]


def _kernels() -> FreshFill:
    fill = for_device(DEV)
    assert fill.lib is not None, fill.why
    return fill


def test_the_kernels_load_on_this_gpu() -> None:
    assert _kernels().why == "the harness's kernels (fresh_fill.cu)"


@pytest.mark.parametrize("dist", list(DISTS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_kernels_write_what_the_definition_says(kind: str, dist: str) -> None:
    """Bit for bit, except where the kernel's fp32 logf/sincospif and the definition's fp64
    ones round to neighbouring bf16 values: at most one unit in the last place, rarely."""
    torch_ops = FreshFill(None, "torch operations")
    for shape in SHAPES:
        got = _kernels().full(shape, 2**61 + 77, kind, dist, DEV)
        want = torch_ops.full(shape, 2**61 + 77, kind, dist, DEV)
        steps = (got.view(torch.int16).int() - want.view(torch.int16).int()).abs()
        assert int(steps.max()) <= 1, (kind, dist, shape)
        assert float((steps == 0).float().mean()) > 0.999, (kind, dist, shape)


def test_rows_and_blocks_made_again_equal_the_filled_tensors_bit_for_bit() -> None:
    fill = _kernels()
    for shape in SHAPES:
        nonces, dists = [5, 2**62 - 1, 123456789], ["normal", "large-logits", "uniform-shifted"]
        # K and V interleaved in one buffer (odd trials' layout), Q contiguous
        kv = torch.full((3, shape.B, shape.S, 2, shape.H, shape.D), float("nan"), dtype=torch.bfloat16, device=DEV)
        for i, (n, d) in enumerate(zip(nonces, dists, strict=True)):
            fill.fill(kv[i, :, :, 0], shape, n, "k", d)
            fill.fill(kv[i, :, :, 1], shape, n, "v", d)
        qs = [fill.full(shape, n, "q", d, DEV) for n, d in zip(nonces, dists, strict=True)]
        table = CallTable.from_columns(torch.tensor(
            [CallTable.columns(n, d, q) for n, d, q in zip(nonces, dists, qs, strict=True)], device=DEV))
        gen = torch.Generator().manual_seed(shape.S)
        desc = torch.stack([torch.randint(0, n, (64,), generator=gen) for n in (3, shape.B, shape.S, shape.H)],
                           dim=1).to(DEV)
        rows = fill.rows(desc, table, shape, "q")
        blocks_k = fill.blocks(desc, table, shape, "k")
        blocks_v = fill.blocks(desc, table, shape, "v")
        assert blocks_k.shape == (64, shape.S, shape.D)
        taken = fill.take(desc, table, qs, shape)
        for i, (c, b, s, h) in enumerate(desc.tolist()):
            assert torch.equal(rows[i], qs[c][b, s, h])
            assert torch.equal(taken[i], qs[c][b, s, h])
            assert torch.equal(blocks_k[i], kv[c, b, :, 0, h])
            assert torch.equal(blocks_v[i], kv[c, b, :, 1, h])
        assert not bool(torch.isnan(kv.float()).any())  # every element written, nothing else


def test_a_fill_is_not_slower_than_the_torch_draws_it_replaced() -> None:
    """A decode-sized K (8 x 32768 x 8 x 128, 512 MB): the kernel against torch's normal_ plus
    the add of V, each timed by events over 10 calls, after a warm-up."""
    fill = _kernels()
    shape = Logical(8, 32768, 8, 128)
    t = torch.empty((shape.B, shape.S, shape.H, shape.D), dtype=torch.bfloat16, device=DEV)
    gen = torch.Generator(device=DEV).manual_seed(1)

    def ours() -> None:
        fill.fill(t, shape, 99, "v", "normal")

    def theirs() -> None:
        t.normal_(0.0, 1.0, generator=gen)
        t.add_(0.5)

    times = {}
    for name, fn in (("kernel", ours), ("torch", theirs)):
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            fn()
        end.record()
        end.synchronize()
        times[name] = start.elapsed_time(end) / 10
    print(f"fill of 512 MB: kernel {times['kernel']:.3f} ms, torch normal_ + add_ {times['torch']:.3f} ms")
    assert times["kernel"] < 1.2 * times["torch"]
