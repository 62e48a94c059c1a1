"""Waiting in tests: poll a condition until it holds or a deadline passes, never a bare sleep.
A test that must wait for something names what it waits for, so that a timeout says which
step did not happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.02) -> T:
    """Call `condition` every `interval_s` until it returns a truthy value, and return that value.
    After `timeout_s` without one, raise TimeoutError naming `what` (the thing waited for)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise TimeoutError(f"waited {timeout_s:g} s for {what}")
        time.sleep(interval_s)
