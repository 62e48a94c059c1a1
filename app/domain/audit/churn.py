"""Churn: the share of the lines an agent adds that are byte-identical to lines it removed
earlier in the session. An unsteered agent circling among near-identical variants puts
back what it took out (about 30% of added lines in the findings DESIGN.md cites).

Each candidate is read as an edit of the kernel it came from: its parent when it names one,
else the same author's previous candidate, else the baseline. Lines are compared byte for
byte (indentation included). Lines with no letter or digit (blank lines, lone braces) are
left out: every edit adds and removes them, and counting them would measure formatting."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.domain.audit.record import AuditRecord


@dataclass(frozen=True)
class Edit:
    """One candidate as an edit: `before` is the kernel it changed (None: nothing known)."""

    number: int
    author: str
    before: str | None
    after: str


@dataclass(frozen=True)
class EditChurn:
    number: int
    author: str
    added: int  # meaningful lines this edit added
    removed: int  # meaningful lines it removed
    readded: int  # added lines identical to lines the same author removed in an earlier edit
    cumulative_added: int
    cumulative_readded: int

    @property
    def share(self) -> float | None:
        """This edit's re-added share (None when it added nothing)."""
        return self.readded / self.added if self.added else None

    @property
    def cumulative_share(self) -> float | None:
        return self.cumulative_readded / self.cumulative_added if self.cumulative_added else None


@dataclass
class ChurnReport:
    edits: list[EditChurn]
    # The lines re-added most often: (line, times re-added).
    top_lines: list[tuple[str, int]] = field(default_factory=list)

    @property
    def added(self) -> int:
        return sum(e.added for e in self.edits)

    @property
    def readded(self) -> int:
        return sum(e.readded for e in self.edits)

    @property
    def share(self) -> float | None:
        """Re-added lines over all added lines of the session (None when nothing was added)."""
        return self.readded / self.added if self.added else None


def meaningful(line: str) -> bool:
    return any(ch.isalnum() for ch in line)


def line_changes(before: str | None, after: str) -> tuple[list[str], list[str]]:
    """(added, removed) meaningful lines of the edit before -> after, as a line diff sees them."""
    old = before.split("\n") if before is not None else []
    new = after.split("\n")
    added: list[str] = []
    removed: list[str] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed.extend(line for line in old[i1:i2] if meaningful(line))
        if tag in ("replace", "insert"):
            added.extend(line for line in new[j1:j2] if meaningful(line))
    return added, removed


def churn(edits: Sequence[Edit], top: int = 10) -> ChurnReport:
    """Churn over a sequence of edits in the order they were made. A line counts as re-added
    when its author removed the very same line in an earlier edit (not in the same one)."""
    removed_by: dict[str, set[str]] = {}
    cumulative_added = cumulative_readded = 0
    out: list[EditChurn] = []
    again: Counter[str] = Counter()
    for edit in edits:
        added, removed = line_changes(edit.before, edit.after)
        earlier = removed_by.setdefault(edit.author, set())
        readded = [line for line in added if line in earlier]
        again.update(readded)
        earlier.update(removed)
        cumulative_added += len(added)
        cumulative_readded += len(readded)
        out.append(EditChurn(edit.number, edit.author, len(added), len(removed), len(readded),
                             cumulative_added, cumulative_readded))
    return ChurnReport(out, again.most_common(top))


def session_edits(record: AuditRecord) -> list[Edit]:
    """The session's candidates as edits, in submission order."""
    last_by_author: dict[str, str] = {}
    edits = []
    for c in record.candidates:
        parent = record.parent_of(c)
        if parent is not None:
            before: str | None = parent.source
        else:
            before = last_by_author.get(c.author, record.baseline_source)
        edits.append(Edit(c.number, c.author, before, c.source))
        last_by_author[c.author] = c.source
    return edits


def session_churn(record: AuditRecord) -> ChurnReport:
    return churn(session_edits(record))
