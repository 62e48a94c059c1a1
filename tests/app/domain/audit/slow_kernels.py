"""CPU stand-in kernels of the audit's recorded session that the stock set lacks: a wrong
kernel as slow as an honest one, so the judge rejects it for its answers alone (a fast wrong
kernel also trips the sanity checks, which would pause the session for another reason)."""

from __future__ import annotations

import time

from harness.attention.abi import AttentionBuffers
from tests.cpu_kernels import missing_tail


def skips_tail_5ms(b: AttentionBuffers) -> int:
    """Half the baseline's time, but only the first 64 query rows are written."""
    time.sleep(0.005)
    return missing_tail(b)
