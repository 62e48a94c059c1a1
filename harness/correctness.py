"""Correctness rule (FlashAttention's): a bf16 kernel may be at most twice as far from the fp32
reference as the same math done in bf16, plus the rounding floor of storing the answer in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# A wrong output whose relative (L2) error stays under this is close to the reference:
# imprecise arithmetic, not a wrong mask or index.
PRECISION_REL = 0.03


@dataclass(frozen=True)
class Check:
    ok: bool
    max_error: float
    tolerance: float
    reason: str = ""


def rounding_floor(ref32: torch.Tensor) -> float:
    """The error of rounding the exact answer to bf16: no bf16 output can do better."""
    return float((ref32.to(torch.bfloat16).float() - ref32).abs().max().item())


def tolerance_tensor(ref32: torch.Tensor, ref_lowp: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """The tolerance as a 0-d tensor on the references' device (no synchronization); with
    `dim`, one tolerance per index of the other dimensions (several checks in one batch)."""
    def worst(t: torch.Tensor) -> torch.Tensor:
        return t.abs().max() if dim is None else t.abs().amax(dim=dim)

    return 2.0 * worst(ref_lowp.float() - ref32) + worst(ref32.to(torch.bfloat16).float() - ref32)


def tolerance(ref32: torch.Tensor, ref_lowp: torch.Tensor) -> float:
    return float(tolerance_tensor(ref32, ref_lowp).item())


def check_output(out: torch.Tensor, ref32: torch.Tensor, ref_lowp: torch.Tensor) -> Check:
    """Compare a candidate output (already NaN-poisoned before the call) with the references."""
    return check_against(out, ref32, tolerance(ref32, ref_lowp))


def check_against(out: torch.Tensor, ref32: torch.Tensor, tol: float) -> Check:
    """check_output with the tolerance already known (the answer key keeps only the fp32
    reference and the tolerance of each trial: harness/answer_key.py)."""
    outf = out.float()
    nonfinite = ~torch.isfinite(outf)
    n_bad = int(nonfinite.sum().item())
    total = outf.numel()
    if n_bad:
        n_nan = int(torch.isnan(outf).sum().item())
        if n_nan == total and _all_poison(out):
            return Check(
                False, float("inf"), tol,
                f"output was stale: none of the {total} output elements was written (each still "
                "holds the NaN poison the harness wrote before the call)",
            )
        if n_nan == n_bad:
            first = _first_index(nonfinite)
            return Check(
                False, float("inf"), tol,
                f"{n_nan} of {total} output elements are NaN (the poison value: never written"
                f" or computed as NaN), first at [b, s, h, d] = {first}",
            )
        return Check(False, float("inf"), tol, f"{n_bad} of {total} output elements are NaN/Inf")
    diff = (outf - ref32).abs()
    err = float(diff.max().item())
    if err <= tol:
        return Check(True, err, tol)
    worst = _first_index(diff == diff.max())
    rel = float((outf - ref32).norm().item() / max(float(ref32.norm().item()), 1e-30))
    kind = "not precise enough" if rel < PRECISION_REL else "wrong result"
    hint = (
        " (the output is close to the reference, as from low-precision arithmetic: "
        "accumulation or operands below bf16)" if rel < PRECISION_REL else ""
    )
    return Check(
        False, err, tol,
        f"{kind}: max error {err:.3e} > tolerance {tol:.3e} (2x bf16-reference error + "
        f"rounding), worst at [b, s, h, d] = {worst}, relative error {rel:.1e}{hint}",
    )


def _all_poison(out: torch.Tensor) -> bool:
    """Every element still has the exact bits of the harness's NaN fill (a NaN the kernel
    computed has other bits on the GPU)."""
    if out.element_size() != 2:
        return True
    poison = torch.full((1,), float("nan"), dtype=out.dtype, device=out.device).view(torch.int16)
    return bool((out.view(torch.int16) == poison).all().item())


def _first_index(mask: torch.Tensor) -> list[int]:
    idx = mask.flatten().nonzero()
    if idx.numel() == 0:
        return []
    flat = int(idx[0].item())
    coords = []
    for size in reversed(mask.shape):
        coords.append(flat % size)
        flat //= size
    return list(reversed(coords))
