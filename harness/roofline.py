"""The two ceilings of a GPU (bf16 matrix rate, copy bandwidth), measured once per GPU and
cached, and the per-scenario floor they imply."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.caches import cache_root

# Measured library rates are practical, not absolute: a hand-written kernel can beat the
# library's GEMM at some shapes. A time under floor / HEADROOM is impossible in earnest.
HEADROOM = 1.25


@dataclass(frozen=True)
class Rates:
    gpu: str
    matrix_tflops: float
    copy_gbps: float

    def floor_ms(self, flops: int, nbytes: int) -> float:
        compute = flops / (self.matrix_tflops * HEADROOM * 1e12)
        memory = nbytes / (self.copy_gbps * HEADROOM * 1e9)
        return max(compute, memory) * 1e3


def _cache_file(gpu: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower()
    return cache_root() / f"roofline-{slug}.json"


def measure_cuda_rates(gpu: str, use_cache: bool = True, keep: bool = True) -> Rates:
    """bf16 8192^3 matrix product and a 1 GiB device copy (bytes read + written), medians."""
    path = _cache_file(gpu)
    if use_cache and path.exists():
        try:
            return Rates(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass
    import torch

    from harness.stats import median

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    src = torch.randn(1 << 28, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)

    def timed(fn: object, reps: int) -> float:
        samples = []
        for _ in range(3):
            fn()  # type: ignore[operator]
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()  # type: ignore[operator]
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        return median(samples)

    mm_ms = timed(lambda: torch.mm(a, b), 10)
    cp_ms = timed(lambda: dst.copy_(src), 10)
    rates = Rates(
        gpu=gpu,
        matrix_tflops=2 * n**3 / (mm_ms * 1e-3) / 1e12,
        copy_gbps=2 * src.numel() * 4 / (cp_ms * 1e-3) / 1e9,
    )
    if not keep:  # an evaluation worker writes nothing: its executor keeps the rates signed
        return rates
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(rates)))
    except OSError:
        pass
    return rates
