"""Choosing scenarios from a suite: the visible/hidden split and the --filter expression."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from harness.scenario import Scenario

SUITE_PARTS = ("visible", "hidden", "all")


def select(
    scenarios: Sequence[Scenario], part: str = "all", filter_expr: str | None = None
) -> list[Scenario]:
    """Scenarios of one part of the suite that match every term of `filter_expr`.

    The expression is comma-separated terms, all of which must match:
    `key=value` compares a scenario field (`category=decode`, `head_dim=128`, `causal=1`);
    anything else is a glob on the name (`*d128*`), or a substring when it has no glob characters.
    """
    if part not in SUITE_PARTS:
        raise ValueError(f"unknown suite part {part!r}; choose one of {', '.join(SUITE_PARTS)}")
    chosen = [
        s for s in scenarios
        if part == "all" or (part == "hidden") == s.hidden
    ]
    if filter_expr:
        terms = [t.strip() for t in filter_expr.split(",") if t.strip()]
        chosen = [s for s in chosen if all(_matches(s, t) for t in terms)]
    return chosen


def _matches(s: Scenario, term: str) -> bool:
    if "=" in term:
        key, _, want = term.partition("=")
        key = key.strip()
        if key not in Scenario.__dataclass_fields__:
            fields = ", ".join(Scenario.__dataclass_fields__)
            raise ValueError(f"unknown scenario field {key!r} in filter; fields are: {fields}")
        have = getattr(s, key)
        want = want.strip()
        if isinstance(have, bool):
            return have == (want.lower() in ("1", "true", "yes", "causal"))
        if isinstance(have, int):
            try:
                return have == int(want)
            except ValueError as exc:
                raise ValueError(f"filter {term!r}: {key} is a number") from exc
        return fnmatch.fnmatchcase(str(have), want)
    if any(c in term for c in "*?["):
        return fnmatch.fnmatchcase(s.name, term)
    return term in s.name
