"""Limits every input must fit before anything is stored: sizes, nesting depth, numbers the
database can hold, finite numbers, no NUL characters. One place, so that the API, the forms,
the websocket, trace import, bank import and the CLI refuse the same things with the same
words (docs/security.md)."""

from __future__ import annotations

import json
import math
from typing import Any

INT64_MAX = 2**63 - 1  # SQLite's INTEGER (and the ids it hands out)
INT64_MIN = -(2**63)
INT32_MAX = 2**31 - 1  # PostgreSQL's INTEGER: what the integer columns of app/store/models.py hold there
MAX_DEPTH = 32  # nesting of JSON objects and lists in any free-form field
MAX_TEXT = 1_000_000  # characters in one text value (a kernel source is ~30 000)
# characters in one object key: the offline agent keys its record by a family setting's slug,
# over 200 characters for a Hopper setting with many knobs set (about 300 at most)
MAX_KEY = 1000
MAX_ITEMS = 100_000  # values in one free-form structure
MAX_SPEEDUP = 1e6  # no kernel is a million times faster than its baseline; charts scale up to this
MAX_MAGNITUDE = 1e18  # any other stored number: far beyond any cost, time or count, far from overflow


def human_bytes(size: float) -> str:
    if size >= 1024 * 1024:
        return f"{size / 1024**2:.1f} MiB".replace(".0 MiB", " MiB")
    return f"{size / 1024:.0f} KiB"


class LimitError(ValueError):
    """An input beyond a limit; the message says which and where."""


def check_json_value(value: Any, where: str = "value", *, max_depth: int = MAX_DEPTH,
                     max_text: int = MAX_TEXT, finite: bool = True) -> None:
    """Refuse (LimitError) a JSON-like value nested deeper than `max_depth`, holding a string
    longer than `max_text` or with a NUL, a number that is not finite (unless `finite` is
    False: the harness's reports say Infinity for an unbounded error) or an integer that does
    not fit 64 bits. Iterative: no depth of input can exhaust the stack."""
    stack: list[tuple[Any, int, str]] = [(value, 0, where)]
    seen = 0
    while stack:
        item, depth, path = stack.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise LimitError(f"{where}: more than {MAX_ITEMS} values")
        if isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                raise LimitError(f"{path}: nested more than {max_depth} levels deep")
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise LimitError(f"{path}: object keys must be text")
                    _check_text(key, f"{path} key", MAX_KEY)
                    stack.append((child, depth + 1, f"{path}.{key}"))
            else:
                stack.extend((child, depth + 1, f"{path}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, str):
            _check_text(item, path, max_text)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            check_int(item, path)
        elif isinstance(item, float) and finite:
            check_float(item, path)


def _check_text(text: str, where: str, max_text: int) -> None:
    if len(text) > max_text:
        raise LimitError(f"{where}: longer than {max_text} characters")
    if "\x00" in text:
        raise LimitError(f"{where}: contains a NUL character")


def check_text(text: str, where: str = "text", max_text: int = MAX_TEXT) -> str:
    _check_text(text, where, max_text)
    return text


def check_int(value: int, where: str = "number") -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise LimitError(f"{where}: {value} does not fit a 64-bit integer")
    return value


def check_float(value: float, where: str = "number") -> float:
    if not math.isfinite(value):
        raise LimitError(f"{where}: only finite numbers are accepted, not {value}")
    return value


def check_speedup(value: float, where: str = "speedup") -> float:
    """A speedup as stored: finite, from 0 to MAX_SPEEDUP (what a chart or a geomean can use)."""
    check_float(value, where)
    if not 0 <= value <= MAX_SPEEDUP:
        raise LimitError(f"{where}: a speedup is from 0 to {MAX_SPEEDUP:g}, not {value:g}")
    return value


def check_magnitude(value: float, where: str = "number") -> float:
    check_float(value, where)
    if abs(value) > MAX_MAGNITUDE:
        raise LimitError(f"{where}: {value:g} is beyond {MAX_MAGNITUDE:g}, the largest number stored")
    return value


def check_speedups_in(value: Any, where: str = "value") -> None:
    """Every number under a key naming a speedup ("speedup", "leader_speedup", ...), at any
    depth of `value`, is a speedup as check_speedup wants it. Anything else there (text, null)
    is no number: pages show it as text or as a failure. Iterative."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                at = f"{path}.{key}"
                if "speedup" in str(key).lower() and isinstance(child, int | float) and not isinstance(child, bool):
                    check_speedup(float(child), at)
                stack.append((child, at))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))


def _no_constant(name: str) -> Any:
    raise LimitError(f"{name} is not a number this server accepts (only finite numbers)")


def parse_json(raw: str | bytes, where: str = "message", *, max_bytes: int = 1_000_000,
               max_depth: int = MAX_DEPTH, finite: bool = True) -> Any:
    """json.loads with limits: size, depth, finite numbers (NaN, Infinity and 1e400 refused),
    integers of 64 bits, no NUL. Raises LimitError (a ValueError) with a readable message."""
    if len(raw) > max_bytes:
        raise LimitError(f"{where}: larger than {max_bytes} bytes")
    try:
        value = json.loads(raw, parse_constant=_no_constant) if finite else json.loads(raw)
    except RecursionError as exc:
        raise LimitError(f"{where}: nested too deeply") from exc
    except json.JSONDecodeError as exc:
        raise LimitError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from exc
    check_json_value(value, where, max_depth=max_depth, finite=finite)
    return value


def json_depth_ok(raw: bytes, max_depth: int) -> bool:
    """Whether the JSON text `raw` nests objects/lists at most `max_depth` deep (a scan that
    skips strings; run before a recursive parser sees the text)."""
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > max_depth:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True
