"""The scenario: one shape of one problem, with a stable name, a category and a hidden flag."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Scenario:
    """One attention-forward shape. Layout is [batch, seqlen, heads, head_dim], bf16."""

    name: str
    category: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    causal: bool
    hidden: bool = False
    model: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    # ABI v1's softmax_scale for the scenario's first trial; None: head_dim^-0.5. Later trials
    # and timed calls use other scales too (harness/attention/fields.py).
    softmax_scale: float | None = None

    def __post_init__(self) -> None:
        for attr in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim"):
            if getattr(self, attr) < 1:
                raise ValueError(f"scenario {self.name}: {attr} must be >= 1")
        if self.heads_q % self.heads_kv:
            raise ValueError(
                f"scenario {self.name}: heads_q ({self.heads_q}) must be a multiple of "
                f"heads_kv ({self.heads_kv})"
            )

    @property
    def group(self) -> int:
        """Query heads per kv head (1 for MHA)."""
        return self.heads_q // self.heads_kv

    @property
    def causal_offset(self) -> int:
        """Bottom-right alignment: query i sees keys j <= i + offset."""
        return self.seqlen_k - self.seqlen_q

    def visible_pairs(self) -> int:
        """Number of (query, key) pairs one head attends to."""
        if not self.causal:
            return self.seqlen_q * self.seqlen_k
        return causal_visible_pairs(self.seqlen_q, self.seqlen_k)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tags"] = list(self.tags)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scenario:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["tags"] = tuple(known.get("tags", ()))
        known["causal"] = bool(known["causal"])
        return cls(**known)


def causal_visible_pairs(seqlen_q: int, seqlen_k: int) -> int:
    """Sum over queries i of clamp(i + (sk - sq) + 1, 0, sk), in closed form."""
    offset = seqlen_k - seqlen_q
    total = 0
    # Rows with i + offset + 1 <= 0 see nothing; rows with i + offset + 1 >= sk see all keys.
    first_partial = max(0, -offset)  # first row that sees at least one key
    first_full = max(0, seqlen_k - offset - 1)  # first row that sees every key
    lo, hi = first_partial, min(seqlen_q, first_full)
    if hi > lo:
        # sum_{i=lo}^{hi-1} (i + offset + 1)
        n = hi - lo
        total += n * (offset + 1) + (lo + hi - 1) * n // 2
    if seqlen_q > first_full:
        total += (seqlen_q - max(first_full, 0)) * seqlen_k
    return total
