"""Diffs as a kernel engineer reads them: every line with its old and new line numbers, runs
of unchanged lines folded to one row beyond CONTEXT lines of a change, and the same rows paired
for a side-by-side view. Templates draw one row per line (no newlines between block elements,
so nothing is double-spaced) and a diff is as tall as its changed lines, not its files."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

CONTEXT = 3


@dataclass(frozen=True)
class DiffRow:
    cls: str  # "ctx" | "add" | "del" | "fold"
    old: int | None  # line number in the first kernel (1-based)
    new: int | None  # line number in the second
    text: str  # the line; for a fold, what it hides
    folded: int = 0  # unchanged lines this fold row stands for

    @property
    def sign(self) -> str:
        return {"add": "+", "del": "-", "ctx": " "}.get(self.cls, "")


@dataclass(frozen=True)
class SplitRow:
    left: DiffRow | None
    right: DiffRow | None


def diff_rows(old: str, new: str, context: int = CONTEXT, full: bool = False) -> list[DiffRow]:
    """Rows from kernel `old` to kernel `new`; [] when identical. `full`: fold nothing."""
    a, b = old.splitlines(), new.splitlines()
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    if all(tag == "equal" for tag, *_ in ops):
        return []
    rows: list[DiffRow] = []
    for k, (tag, i1, i2, j1, j2) in enumerate(ops):
        if tag == "equal":
            keep_head = 0 if k == 0 else context  # lines after the previous change
            keep_tail = 0 if k == len(ops) - 1 else context  # lines before the next one
            n = i2 - i1
            if full or n <= keep_head + keep_tail + 1:
                rows += [DiffRow("ctx", i1 + d + 1, j1 + d + 1, a[i1 + d]) for d in range(n)]
                continue
            rows += [DiffRow("ctx", i1 + d + 1, j1 + d + 1, a[i1 + d]) for d in range(keep_head)]
            hidden = n - keep_head - keep_tail
            rows.append(DiffRow("fold", i1 + keep_head + 1, j1 + keep_head + 1,
                                f"{hidden} unchanged lines ({i1 + keep_head + 1}-{i1 + keep_head + hidden})", hidden))
            rows += [DiffRow("ctx", i2 - keep_tail + d + 1, j2 - keep_tail + d + 1, a[i2 - keep_tail + d])
                     for d in range(keep_tail)]
            continue
        rows += [DiffRow("del", i + 1, None, a[i]) for i in range(i1, i2)]
        rows += [DiffRow("add", None, j + 1, b[j]) for j in range(j1, j2)]
    return rows


def split_rows(rows: list[DiffRow]) -> list[SplitRow]:
    """The rows side by side: unchanged and folded lines on both sides, each run of removed
    lines beside the added lines that replaced it."""
    out: list[SplitRow] = []
    i = 0
    while i < len(rows):
        row = rows[i]
        if row.cls in ("ctx", "fold"):
            out.append(SplitRow(row, row))
            i += 1
            continue
        dels: list[DiffRow] = []
        adds: list[DiffRow] = []
        while i < len(rows) and rows[i].cls == "del":
            dels.append(rows[i])
            i += 1
        while i < len(rows) and rows[i].cls == "add":
            adds.append(rows[i])
            i += 1
        for k in range(max(len(dels), len(adds))):
            out.append(SplitRow(dels[k] if k < len(dels) else None, adds[k] if k < len(adds) else None))
    return out
