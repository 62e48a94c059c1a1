"""The default 182-scenario attention-forward suite (bf16), mirroring FA3's benchmark grid
and production serving shapes. Names are stable: tests, traces and reports key on them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from harness.scenario import Scenario

TOKENS = 16 * 1024  # FA3 grid: batch * seqlen = 16k tokens
HIDDEN = 2048  # FA3 grid: heads * head_dim = 2048

# (name, heads_q, heads_kv, head_dim) before tensor-parallel sharding.
MODELS: dict[str, tuple[int, int, int]] = {
    "llama3-8b": (32, 8, 128),
    "llama3-70b": (64, 8, 128),
    "llama3-405b": (128, 8, 128),
    "qwen2.5-7b": (28, 4, 128),
    "gemma2-9b": (16, 8, 256),
}
# Tensor-parallel degrees served per model (qwen3-32b has llama3-70b's shapes; not repeated).
TP_DEGREES: dict[str, tuple[int, ...]] = {
    "llama3-8b": (1, 2, 4, 8),
    "llama3-70b": (1, 2, 4, 8),
    "llama3-405b": (1, 8),
    "qwen2.5-7b": (1, 2, 4),
    "gemma2-9b": (1, 2, 4, 8),
}

HIDDEN_FRACTION = 0.25


def _sharded(model: str, tp: int) -> tuple[int, int, int]:
    hq, hkv, d = MODELS[model]
    return hq // tp, max(1, hkv // tp), d


def _square_prefill() -> Iterable[Scenario]:
    for d in (64, 128, 256):
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            for causal in (False, True):
                b, h = TOKENS // s, HIDDEN // d
                yield Scenario(
                    name=f"prefill-d{d}-s{s}-b{b}-h{h}-{'causal' if causal else 'full'}",
                    category="prefill",
                    batch=b, seqlen_q=s, seqlen_k=s, heads_q=h, heads_kv=h, head_dim=d,
                    causal=causal,
                )


def _gqa_prefill() -> Iterable[Scenario]:
    for model, tps in TP_DEGREES.items():
        for tp in tps:
            hq, hkv, d = _sharded(model, tp)
            for s, b, causal in ((4096, 2, True), (8192, 1, True), (4096, 2, False)):
                yield Scenario(
                    name=f"gqa-{model}-tp{tp}-s{s}-b{b}-{'causal' if causal else 'full'}",
                    category="gqa",
                    batch=b, seqlen_q=s, seqlen_k=s, heads_q=hq, heads_kv=hkv, head_dim=d,
                    causal=causal, model=f"{model}/tp{tp}",
                )


def _chunked_prefill() -> Iterable[Scenario]:
    for model, tp in (("llama3-8b", 1), ("llama3-70b", 8)):
        hq, hkv, d = _sharded(model, tp)
        for q in (256, 512, 1024, 2048):
            for k in (8192, 16384, 32768, 65536):
                yield Scenario(
                    name=f"chunk-{model}-tp{tp}-q{q}-k{k}",
                    category="chunked",
                    batch=1, seqlen_q=q, seqlen_k=k, heads_q=hq, heads_kv=hkv, head_dim=d,
                    causal=True, model=f"{model}/tp{tp}",
                )


def _decode() -> Iterable[Scenario]:
    # (batch, keys): the KV cache stays within about 1 GiB per tensor for 8 kv heads at d128.
    pairs = ((1, 32768), (8, 16384), (32, 4096), (64, 8192), (128, 1024))
    for model, tp in (("llama3-8b", 1), ("llama3-70b", 8), ("gemma2-9b", 1)):
        hq, hkv, d = _sharded(model, tp)
        queries: tuple[int, ...] = (1, 4)
        for b, k in pairs:
            qs = (1, 2, 4) if model == "llama3-8b" and b in (1, 32, 128) else queries
            for q in qs:
                yield Scenario(
                    name=f"decode-{model}-tp{tp}-q{q}-b{b}-k{k}",
                    category="decode",
                    batch=b, seqlen_q=q, seqlen_k=k, heads_q=hq, heads_kv=hkv, head_dim=d,
                    causal=True, model=f"{model}/tp{tp}",
                )


# Sizes no block size divides; causal only where every query sees at least one key.
RAGGED_PAIRS: tuple[tuple[int, int, bool], ...] = (
    (77, 77, True),
    (113, 203, True),
    (239, 1, False),
    (799, 3, False),
    (500, 777, True),
    (1000, 1000, True),
    (1023, 1024, True),
    (3001, 3001, False),
    (4224, 4224, True),
    (2049, 4097, True),
)
RAGGED_HEADS: dict[int, tuple[int, int]] = {64: (16, 4), 128: (8, 2), 256: (8, 8)}


def _ragged() -> Iterable[Scenario]:
    for sq, sk, causal in RAGGED_PAIRS:
        for d, (hq, hkv) in RAGGED_HEADS.items():
            b = 2 if max(sq, sk) <= 1024 else 1
            yield Scenario(
                name=f"ragged-d{d}-q{sq}-k{sk}-{'causal' if causal else 'full'}",
                category="ragged",
                batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv, head_dim=d,
                causal=causal,
            )


def _stable_rank(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def _mark_hidden(scenarios: list[Scenario]) -> list[Scenario]:
    """Hide about a quarter of each category, chosen by a hash of the name (stable)."""
    by_cat: dict[str, list[Scenario]] = {}
    for s in scenarios:
        by_cat.setdefault(s.category, []).append(s)
    hidden: set[str] = set()
    for items in by_cat.values():
        n_hidden = round(len(items) * HIDDEN_FRACTION)
        hidden.update(s.name for s in sorted(items, key=lambda s: _stable_rank(s.name))[:n_hidden])
    return [
        Scenario(**{**s.__dict__, "hidden": s.name in hidden}) if s.name in hidden else s
        for s in scenarios
    ]


def default_suite() -> list[Scenario]:
    """All 182 scenarios in a stable order."""
    scenarios = [
        *_square_prefill(),
        *_gqa_prefill(),
        *_chunked_prefill(),
        *_decode(),
        *_ragged(),
    ]
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise AssertionError("scenario names must be unique")
    return _mark_hidden(scenarios)
