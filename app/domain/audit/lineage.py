"""The candidate lineage tree: the baseline at the root, each candidate under the one it was
derived from, every node with its verdict and geomean, the path to the leader marked; laid
out for a server-drawn SVG. Also the diff between any two kernels of the session."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from app.domain.audit.diff_view import DiffRow, SplitRow, diff_rows, split_rows
from app.domain.audit.record import AuditRecord
from app.store.models import Candidate

NODE_W, NODE_H = 92, 44  # px, one node
GAP_X, GAP_Y = 14, 34  # between siblings, between generations
MARGIN = 10


@dataclass
class LineageNode:
    number: int | None  # None: the baseline
    title: str
    author: str
    verdict: str  # leader / backup / rejected, or the candidate's status while unjudged; "baseline"
    speedup: float | None
    reason: str
    children: list[LineageNode] = field(default_factory=list)
    on_leader_path: bool = False
    is_leader: bool = False
    depth: int = 0
    questions: list[str] = field(default_factory=list)  # messages delivered just before it was judged
    x: float = 0.0  # centre, px
    y: float = 0.0  # top, px

    @property
    def label(self) -> str:
        return "baseline" if self.number is None else f"#{self.number}"

    @property
    def key(self) -> str:
        return "baseline" if self.number is None else str(self.number)


@dataclass
class Lineage:
    root: LineageNode
    nodes: list[LineageNode]  # depth-first, parents before children
    width: float
    height: float
    leader_path: list[str]  # node keys from the baseline to the leader

    def edges(self) -> list[tuple[LineageNode, LineageNode]]:
        return [(n, c) for n in self.nodes for c in n.children]


def _node(c: Candidate) -> LineageNode:
    return LineageNode(c.number, c.title, c.author, c.verdict or c.status, c.speedup, c.verdict_reason)


def build_lineage(record: AuditRecord) -> Lineage:
    root = LineageNode(None, "the session's starting kernel", "", "baseline", 1.0, "")
    by_row: dict[int, LineageNode] = {}
    for c in record.candidates:
        by_row[c.id or 0] = _node(c)
    for c in record.candidates:
        parent = by_row.get(c.parent_id or -1)
        # A parent that comes later than its child cannot happen in a live session; a hand-made
        # trace could try it: hang such a child under the baseline rather than make a cycle.
        if parent is None or (parent.number or 0) >= c.number:
            parent = root
        parent.children.append(by_row[c.id or 0])

    leader = record.leader
    path: list[str] = []
    if leader is not None:
        chain: list[Candidate] = []
        cursor: Candidate | None = leader
        while cursor is not None and cursor not in chain:
            chain.append(cursor)
            cursor = record.parent_of(cursor)
        for c in chain:
            node = by_row[c.id or 0]
            node.on_leader_path = True
        by_row[leader.id or 0].is_leader = True
        root.on_leader_path = True
        path = ["baseline", *[str(c.number) for c in reversed(chain)]]

    nodes: list[LineageNode] = []
    next_leaf = 0

    def place(node: LineageNode, depth: int) -> None:
        nonlocal next_leaf
        node.depth = depth
        node.y = MARGIN + depth * (NODE_H + GAP_Y)
        nodes.append(node)
        for child in node.children:
            place(child, depth + 1)
        if node.children:
            node.x = (node.children[0].x + node.children[-1].x) / 2
        else:
            node.x = MARGIN + NODE_W / 2 + next_leaf * (NODE_W + GAP_X)
            next_leaf += 1

    _mark_questions(record, by_row)
    place(root, 0)
    width = MARGIN * 2 + max(next_leaf, 1) * (NODE_W + GAP_X) - GAP_X
    height = MARGIN * 2 + (max(n.depth for n in nodes) + 1) * (NODE_H + GAP_Y) - GAP_Y
    return Lineage(root, nodes, width, height, path)


def _mark_questions(record: AuditRecord, by_row: dict[int, LineageNode]) -> None:
    """Each delivered message marks the first candidate judged after it: where it arrived."""
    items = {i.id: i for i in record.interventions}
    waiting: list[str] = []
    for e in record.events:
        payload = e.payload if isinstance(e.payload, dict) else {}
        if e.kind == "delivered":
            for ref in payload.get("intervention_ids") or []:
                item = items.get(record.row_id("intervention", ref)) if isinstance(ref, int) else None
                if item is not None:
                    waiting.append(f"{item.author} {item.kind}: {item.text}")
        elif e.kind == "verdict" and waiting:
            number = payload.get("number")
            c = record.candidate(number) if isinstance(number, int) else None
            if c is not None and c.id in by_row:
                by_row[c.id].questions.extend(waiting)
                waiting = []


@dataclass
class KernelDiff:
    a: str  # "baseline" or a candidate number
    b: str
    lines: list[tuple[str, str]]  # (css class, line) as unified_diff gives them
    added: int
    removed: int
    missing: str = ""  # why there is nothing to compare
    rows: list[DiffRow] = field(default_factory=list)  # numbered, folded (app/domain/audit/diff_view.py)

    @property
    def split(self) -> list[SplitRow]:
        return split_rows(self.rows)

    @property
    def identical(self) -> bool:
        return not self.missing and not self.lines


def parse_ref(ref: str) -> int | None:
    """'baseline' -> None, '7' or '#7' -> 7; ValueError otherwise."""
    ref = ref.strip().lstrip("#")
    if ref in ("", "baseline", "0"):
        return None
    number = int(ref)
    if number < 1:
        raise ValueError(ref)
    return number


def kernel_diff(record: AuditRecord, a: int | None, b: int | None, full: bool = False) -> KernelDiff:
    """The unified diff from kernel `a` to kernel `b` (None: the baseline)."""
    name_a = "baseline" if a is None else f"#{a}"
    name_b = "baseline" if b is None else f"#{b}"
    key_a = "baseline" if a is None else str(a)
    key_b = "baseline" if b is None else str(b)
    for ref, name in ((a, name_a), (b, name_b)):
        if ref is not None and record.candidate(ref) is None:
            return KernelDiff(key_a, key_b, [], 0, 0, f"this session has no candidate {name}")
    source_a, source_b = record.source_of(a), record.source_of(b)
    if source_a is None or source_b is None:
        return KernelDiff(key_a, key_b, [], 0, 0,
                          f"the baseline file ({record.session.baseline}) is not on this machine and the "
                          "trace does not carry it")
    lines = unified_diff(source_a, source_b, name_a, name_b)
    added = sum(1 for cls, _ in lines if cls == "add")
    removed = sum(1 for cls, _ in lines if cls == "del")
    return KernelDiff(key_a, key_b, lines, added, removed, rows=diff_rows(source_a, source_b, full=full))


def unified_diff(parent: str, child: str, parent_name: str, child_name: str) -> list[tuple[str, str]]:
    """(css class, line) pairs of a unified diff, for the candidate and audit pages."""
    out = []
    for line in difflib.unified_diff(parent.splitlines(), child.splitlines(), parent_name, child_name,
                                     lineterm="", n=3):
        if line.startswith(("+++", "---")):
            cls = "meta"
        elif line.startswith("@@"):
            cls = "hunk"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        else:
            cls = "ctx"
        out.append((cls, line))
    return out
