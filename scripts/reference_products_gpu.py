"""The fp32 reference's q k^T on the tensor cores (exact bf16 products summed in fp32:
attention/reference.py, products_exact_in_fp32) against the upcast fp32 product it replaced, on
the GPU (not a test): every scenario of the suite with the harness's own trial inputs
(distribution, layout, softmax_scale per trial), each reference timed alone with the device
synchronized around it. Prints per category the seconds of each and the distances, in units of
each trial's tolerance, between the two fp32 answers, of the tolerance itself, and on the small
shapes of each from an fp64 answer.

    python3 scripts/reference_products_gpu.py [--trials 2] [--filter SUBSTRING] [--json OUT]
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from harness.attention.forward import AttentionForward
from harness.attention.reference import attention_reference
from harness.correctness import tolerance
from harness.scenario import Scenario
from scripts.reference_fused_gpu import FP64_MAX_SCORES, fp64_answer, rows_by_category, timed


def measure(problem: AttentionForward, s: Scenario, trial: int) -> dict[str, Any]:
    dev = torch.device("cuda")
    bufs = problem.buffers(s, problem.make_inputs(s, trial, dev), problem.new_output(s, dev), None, trial, trial)
    scale = float(bufs.scale)
    ref = partial(attention_reference, bufs.q, bufs.k, bufs.v, causal=s.causal, scale=scale)
    ref16, t16 = timed(partial(problem.reference, s, bufs, torch.bfloat16))
    tensor, t_tensor = timed(partial(ref, exact_products=True))
    upcast, t_upcast = timed(partial(ref, exact_products=False))
    tol = tolerance(upcast, ref16)
    row: dict[str, Any] = {
        "scenario": s.name, "category": s.category, "trial": trial, "t_ref16": t16,
        "t_tensor": t_tensor, "t_upcast": t_upcast, "tolerance": tol,
        "tensor_vs_upcast": float((tensor - upcast).abs().max().item()),
        "tolerance_shift": abs(tolerance(tensor, ref16) - tol),
    }
    if s.batch * s.heads_q * s.seqlen_q * s.seqlen_k <= FP64_MAX_SCORES:
        ref64 = fp64_answer(bufs.q, bufs.k, bufs.v, s.causal, scale)
        row["upcast_vs_fp64"] = float((upcast.double() - ref64).abs().max().item())
        row["tensor_vs_fp64"] = float((tensor.double() - ref64).abs().max().item())
    return row


def main() -> None:
    by = rows_by_category(measure)

    def units(r: dict[str, Any], key: str) -> float:
        return float(r[key]) / max(r["tolerance"], 1e-30)

    print("| category | trials | upcast fp32 s | tensor-core fp32 s | bf16 s | max tensor - upcast | "
          "max tolerance shift | fp64 trials | max upcast - fp64 | max tensor - fp64 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cat, rs in by.items():
        small = [r for r in rs if "tensor_vs_fp64" in r]
        print(f"| {cat} | {len(rs)} | {sum(r['t_upcast'] for r in rs):.2f} | "
              f"{sum(r['t_tensor'] for r in rs):.2f} | {sum(r['t_ref16'] for r in rs):.2f} | "
              f"{max(units(r, 'tensor_vs_upcast') for r in rs):.1e} | "
              f"{max(units(r, 'tolerance_shift') for r in rs):.1e} | {len(small)} | "
              f"{max((units(r, 'upcast_vs_fp64') for r in small), default=0):.1e} | "
              f"{max((units(r, 'tensor_vs_fp64') for r in small), default=0):.1e} |")


if __name__ == "__main__":
    main()
