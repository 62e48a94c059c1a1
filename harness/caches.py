"""What the harness keeps on a machine beyond one process, under one folder
(SOCRATIC_CACHE_DIR, default ~/.cache/socratic): compiled kernels (`kernels/`, `shim/`:
harness/compile.py), the GPU's measured rates (`roofline-*.json`: harness/roofline.py), the
naive baseline's times (`baseline-times/`: harness/peer_cache.py), and Python's compiled
modules where the interpreter keeps none of its own (`pycache/`: keep_bytecode below)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# The package whose folder says whether this interpreter keeps bytecode beside the sources:
# the largest import of every harness process (~2,100 modules with its compiler stack).
PROBE_PACKAGE = "torch"
# SOCRATIC_BYTECODE_CACHE values that turn the bytecode cache off (any other value leaves it on).
OFF = frozenset({"0", "false", "no", "off"})


def cache_root() -> Path:
    root = os.environ.get("SOCRATIC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "socratic")
    return Path(root)


def keep_bytecode(probe: str = PROBE_PACKAGE) -> Path | None:
    """Python's compiled modules kept under the cache folder, where this interpreter would
    otherwise compile every module from its source in every process. The GPU machine's image
    sets PYTHONDONTWRITEBYTECODE=1 and ships torch without bytecode: `import torch` took 5.1-7.9 s
    there, the worker's imports (fa3-fwd's first use pulls in torch._dynamo) 10-12 s, in every
    new process (docs/lab/2026-12-03-harness-pass-6-bytecode.md). Called first by the
    command-line entry points; the environment it sets reaches the worker processes they start.
    SOCRATIC_BYTECODE_CACHE=0 (or false, no, off) turns it off. Returns the folder, or None
    where it changed nothing: bytecode already beside the probe package's sources (or Python
    free to write it there), a prefix already chosen (PYTHONPYCACHEPREFIX), or turned off."""
    off = os.environ.get("SOCRATIC_BYTECODE_CACHE", "1").strip().lower() in OFF
    if off or sys.pycache_prefix is not None:
        return None
    spec = importlib.util.find_spec(probe)
    folder = Path(spec.origin).parent if spec is not None and spec.origin else None
    if folder is not None and (folder / "__pycache__").is_dir():
        return None  # installed with its bytecode
    if not sys.dont_write_bytecode and folder is not None and os.access(folder, os.W_OK):
        return None  # Python writes it beside the sources on the first import
    target = cache_root() / "pycache"
    sys.pycache_prefix = str(target)
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = str(target)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return target
