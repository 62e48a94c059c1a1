"""The workspace tools: what a model-driven agent (Claude, or any MCP client) works with.
The agent edits one working copy of the kernel (the draft), runs the harness on it, reads
what the session has learnt, asks the question bank, and may declare that it is done.

The runner executes every one of them (app/runner/workspace.py), so each call is a tool
boundary where steering is delivered, and the draft lives in the session's runner state."""

from __future__ import annotations

from typing import Any

from app.agents.base import DECLARE_DONE, LIST_CANDIDATES, READ_CANDIDATE, TOOL_SPECS
from question_bank.agent_tool import TOOL_SPEC as BANK_TOOL_SPEC

READ_KERNEL = "read_kernel"
WRITE_KERNEL = "write_kernel"
EDIT_KERNEL = "edit_kernel"
EVALUATE = "evaluate"
READ_FINDINGS = "read_findings"
CONSULT_BANK = str(BANK_TOOL_SPEC["name"])

KERNEL_VIEWS = ("current", "baseline", "leader", "contract")

_BY_NAME = {t["name"]: t for t in TOOL_SPECS}

WORKSPACE_TOOL_SPECS: list[dict[str, Any]] = [
    {
        "name": READ_KERNEL,
        "description": (
            "Read a kernel: 'current' is your working copy (what evaluate runs), 'baseline' the kernel "
            "the session started from, 'leader' the best kernel the judge has accepted so far, and "
            "'contract' the ABI header every kernel implements."
        ),
        "input_schema": {
            "type": "object",
            "properties": {"which": {"type": "string", "enum": list(KERNEL_VIEWS),
                                     "description": "which text to read (default: current)"}},
        },
    },
    {
        "name": WRITE_KERNEL,
        "description": "Replace your working copy with a complete kernel file. Nothing runs until you call evaluate.",
        "input_schema": {
            "type": "object",
            "properties": {"source": {"type": "string", "description": "the whole kernel file"}},
            "required": ["source"],
        },
    },
    {
        "name": EDIT_KERNEL,
        "description": (
            "Edit your working copy: replace the exact text `old` with `new`. `old` must occur exactly once "
            "unless replace_all is true. Prefer this to rewriting a long file."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "old": {"type": "string", "description": "text to find, copied exactly"},
                "new": {"type": "string", "description": "its replacement"},
                "replace_all": {"type": "boolean", "description": "replace every occurrence (default false)"},
            },
            "required": ["old", "new"],
        },
    },
    {
        "name": EVALUATE,
        "description": (
            "Run the harness on your working copy: static checks, compile, correctness on fresh inputs, "
            "timing against the baseline on the visible scenarios. You get a compact result (geomean, "
            "failures with reasons, slowest scenarios) and the judge's verdict (leader, backup or rejected). "
            "Hidden scenarios are run too and only counted."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "description": "a few words on what changed"},
                "notes": {"type": "string", "description": "why this should be faster"},
            },
        },
    },
    _BY_NAME[LIST_CANDIDATES],
    _BY_NAME[READ_CANDIDATE],
    {
        "name": READ_FINDINGS,
        "description": (
            "Read what this session has learnt so far: the leader, every candidate with its verdict and "
            "notes (what worked, what failed and why), and the questions people asked you."
        ),
        "input_schema": {"type": "object", "properties": {}},
    },
    BANK_TOOL_SPEC,
    _BY_NAME[DECLARE_DONE],
]
WORKSPACE_TOOL_NAMES = frozenset(t["name"] for t in WORKSPACE_TOOL_SPECS)
# The tools app/runner/workspace.py implements (the others are the runner's own).
RUNNER_WORKSPACE_TOOLS = frozenset({READ_KERNEL, WRITE_KERNEL, EDIT_KERNEL, EVALUATE, READ_FINDINGS, CONSULT_BANK})
# Tools whose call changes the session: a steering message that is waiting is shown before them.
ACTING_TOOLS = frozenset({EVALUATE, WRITE_KERNEL, EDIT_KERNEL, DECLARE_DONE, "submit_candidate"})


class EditError(ValueError):
    """An edit that cannot be applied; the message tells the agent why."""


def apply_edit(text: str, old: str, new: str, replace_all: bool = False) -> tuple[str, int]:
    """`text` with `old` replaced by `new`; returns the new text and how many places changed."""
    if not old:
        raise EditError("'old' is empty: give the exact text to replace")
    count = text.count(old)
    if count == 0:
        raise EditError("'old' does not occur in the working copy (read_kernel shows it; copy the text exactly, "
                        "whitespace included)")
    if count > 1 and not replace_all:
        raise EditError(f"'old' occurs {count} times; add surrounding lines to make it unique, or set replace_all")
    return text.replace(old, new), count
