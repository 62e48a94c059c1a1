"""A CPU stand-in whose module writes a file when it is imported (tests/harness/test_sandbox.py):
a library's load-time code, which the static checks refuse in CUDA source, in Python form."""

from __future__ import annotations

import contextlib
import os

from harness.attention.abi import AttentionBuffers
from tests.cpu_kernels import correct

with contextlib.suppress(OSError), open(os.environ.get("SOCRATIC_TEST_SANDBOX_TARGET", "/tmp/x"), "w") as _f:
    _f.write("written at import")


def kernel(b: AttentionBuffers) -> int:
    return correct(b)
