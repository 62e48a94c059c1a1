"""Splice files: the text edits that turn the family's templates into a knob's variant, kept beside
the templates (`splices/<knob>.splice`) so that render.py only chooses which ones apply.

A splice file starts with `//` lines (why the knob exists), then markers at the start of a line:

    @@ edit [xN|all|some] the exact text to find: once by default, N times, every occurrence
                         (possibly none) or at least one
    @@ into              what replaces it
    @@ block NAME        a named piece of code that render.py places itself
    @@@ GROUP            the edits after this line form their own group (applied on their own)

The text of a marker runs to the next marker line; a marker ending in ` -n` drops that text's final
newline. `@NAME@` in an edit or block is filled from the values render.py passes."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

SPLICES = Path(__file__).with_name("splices")


@dataclass(frozen=True)
class Edit:
    old: str
    new: str
    count: str = "x1"  # "xN": exactly N occurrences; "all": any number; "some": at least one


@dataclass(frozen=True)
class Splice:
    name: str
    groups: dict[str, tuple[Edit, ...]] = field(default_factory=dict)
    blocks: dict[str, str] = field(default_factory=dict)

    def edits(self, group: str = "") -> tuple[Edit, ...]:
        return self.groups[group]

    def block(self, name: str, **values: object) -> str:
        return fill(self.blocks[name], values)


def fill(text: str, values: dict[str, object]) -> str:
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    return text


def _parse(name: str, source: str) -> Splice:
    groups: dict[str, list[Edit]] = {"": []}
    blocks: dict[str, str] = {}
    group = ""
    pending: tuple[str, str] | None = None  # an edit's old text, waiting for its `into`
    marker: list[str] | None = None
    body: list[str] = []

    def close() -> None:
        nonlocal pending
        if marker is None:
            return
        text = "".join(body)
        if marker[-1] == "-n":
            text = text[:-1] if text.endswith("\n") else text
        kind = marker[1]
        if kind == "edit":
            spec = marker[2] if len(marker) > 2 and marker[2] != "-n" else "x1"
            pending = (text, spec)
        elif kind == "into":
            if pending is None:
                raise ValueError(f"{name}.splice: `into` without an `edit`")
            groups[group].append(Edit(pending[0], text, pending[1]))
            pending = None
        elif kind == "block":
            blocks[marker[2]] = text
        else:
            raise ValueError(f"{name}.splice: unknown marker {' '.join(marker)!r}")

    for line in source.splitlines(keepends=True):
        if line.startswith("@@@ "):
            close()
            marker, body = None, []
            group = line[4:].strip()
            groups.setdefault(group, [])
        elif line.startswith("@@ "):
            close()
            marker, body = line.split(), []
        elif marker is not None:
            body.append(line)
    close()
    if pending is not None:
        raise ValueError(f"{name}.splice: an `edit` without its `into`")
    return Splice(name, {g: tuple(e) for g, e in groups.items()}, blocks)


@cache
def load(name: str) -> Splice:
    return _parse(name, (SPLICES / f"{name}.splice").read_text())


def swap(text: str, old: str, new: str, count: str = "x1") -> str:
    """Replace `old`, which must occur as `count` says (an Edit's count): a template edit that
    moves it fails the render loudly instead of leaving a half-converted kernel."""
    found = text.count(old)
    ok = found >= 1 if count == "some" else count == "all" or found == int(count[1:])
    if not ok:
        raise RuntimeError(f"template: expected {count} of {old!r}, found {found}")
    return text.replace(old, new)


def apply(text: str, name: str, group: str = "", **values: object) -> str:
    """Every edit of one group of a splice file, in order."""
    for e in load(name).edits(group):
        text = swap(text, fill(e.old, values), fill(e.new, values), e.count)
    return text
