"""The campaign's evolution tree as SVG positions (templates/fragments/campaign_live.html draws
it; static/tree_zoom.js zooms and pans it). One band per agent, headed by its name (the name the
leaderboard uses); rows are generations: a kernel sits one row below the kernel it was built on
(its parent in its session, else the parent evolution's judge chose, else the other agent's
kernel it followed from the board), so that every edge spans one row. Within a band the kernels
are laid out as a tidy tree (each subtree over its own run of slots, a parent centred over its
children). Edges run down from the parent into the gap between the rows, across, and down into
the child: they cross no label, since labels sit beside their nodes on the rows and the gaps hold
only edges (each parent's run across agents at its own height in the gap). An edge that is not a
kernel's first parent (a rare second parent) is drawn as a curve."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

ROW = 64  # px from one generation to the next
SLOT = 108  # px per leaf: a node and its label ("#12 16.85x", "#12 discarded")
INDENT = 10  # px from a slot's left edge to its node (the label runs right of it)
BAND_MIN = 170  # px: a band is at least as wide as its two-line heading
GAP = 16  # px between bands
TOP = 70  # px above the first row: the headings
PAD = 16  # px inside a band's edges
RADIUS, LEADER_RADIUS = 7, 10
# px from the middle of a gap: edges from kernels of other agents (or a judge's choice) run off the
# middle, where lineage edges run, each parent of a row at its own height, so that their runs do not
# overlap one another; all stay clear of the labels above and below the gap
STAGGER = (7, -7, 13, -13, 19, -19)


def heading(name: str) -> list[str]:
    """An agent's name in at most two lines: "agent 1 (tiling, seed 0)" -> "agent 1", "(tiling, seed 0)"."""
    head, sep, rest = name.partition(" (")
    return [head, f"({rest}"] if sep else [name]


def label(n: dict[str, Any]) -> str:
    speed = n.get("speedup")
    if n.get("ghost"):
        return f"#{n['number']} {n.get('verdict') or 'rejected'}"
    if isinstance(speed, int | float) and not isinstance(speed, bool):
        return f"#{n['number']} {speed:.2f}x"
    status = str(n.get("status") or "")
    return f"#{n['number']} {'unjudged' if status == 'not judged' else status}".rstrip()


def _depths(ids: list[int], first_parent: dict[int, int]) -> dict[int, int]:
    """Each kernel's generation: 0 without a parent, else its first parent's plus one."""
    depth: dict[int, int] = {}
    for i in ids:
        chain: list[int] = []
        node: int | None = i
        while node is not None and node not in depth:
            if node in chain:  # a circle (only a hostile import): its kernels are roots
                for looped in chain[chain.index(node):]:
                    depth[looped] = 0
                chain = chain[:chain.index(node)]
                break
            chain.append(node)
            node = first_parent.get(node)
        base = depth[node] if node is not None and node in depth else -1
        for k, member in enumerate(reversed(chain), start=1):
            depth[member] = base + k
    return depth


def _slots(roots: list[int], children: dict[int, list[int]]) -> tuple[dict[int, float], int]:
    """Tidy positions in slot units (leaves left to right, each parent centred over its
    children), without recursion: a lineage may be hundreds of kernels long."""
    where: dict[int, float] = {}
    next_slot = 0
    for root in roots:
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in where:
                continue
            kids = [k for k in children.get(node, []) if k not in where]
            if kids and not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in reversed(kids))
                continue
            placed = [where[k] for k in children.get(node, []) if k in where]
            if placed:
                where[node] = (placed[0] + placed[-1]) / 2
            else:
                where[node] = next_slot
                next_slot += 1
    return where, next_slot


def tree_layout(tree: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Positions, bands and edge paths for the SVG tree of `app/domain/campaigns/views.py`'s `tree`."""
    nodes = sorted(tree["nodes"], key=lambda n: (n["session_id"], n["number"], n["id"]))
    by_id = {n["id"]: n for n in nodes}
    agents = [(a["session_id"], a["name"]) for a in tree.get("agents", [])]
    for n in nodes:  # a tree without its agents list (older callers): the agents in node order
        if n["session_id"] not in [sid for sid, _ in agents]:
            agents.append((n["session_id"], str(n.get("agent", f"session {n['session_id']}"))))
    first_parent: dict[int, int] = {}
    for kind in ("lineage", "mutation", "board"):
        for e in tree["edges"]:
            if e["kind"] == kind and e["from"] in by_id and e["to"] in by_id and e["to"] not in first_parent:
                first_parent[e["to"]] = e["from"]
    depth = _depths([n["id"] for n in nodes], first_parent)
    children: dict[int, list[int]] = defaultdict(list)
    roots: dict[int, list[int]] = defaultdict(list)
    for n in nodes:
        up = first_parent.get(n["id"])
        if up is not None and by_id[up]["session_id"] == n["session_id"] and depth[n["id"]] == depth[up] + 1:
            children[up].append(n["id"])
        else:
            roots[n["session_id"]].append(n["id"])
    pos: dict[int, tuple[float, float]] = {}
    bands = []
    x0: float = 0.0
    for sid, name in agents:
        where, used = _slots(roots.get(sid, []), children)
        width = max(BAND_MIN, used * SLOT + 2 * PAD)
        left = x0 + (width - used * SLOT) / 2 + INDENT
        for i, slot in where.items():
            pos[i] = (round(left + slot * SLOT, 1), TOP + depth[i] * ROW)
        bands.append({"session_id": sid, "name": name, "lines": heading(name), "x": x0, "width": width,
                      "cx": x0 + width / 2, "empty": not where})
        x0 += width + GAP
    placed = [{**n, "x": pos[n["id"]][0], "y": pos[n["id"]][1], "label": label(n),
               "r": LEADER_RADIUS if n.get("leader") else RADIUS} for n in nodes if n["id"] in pos]
    lane: dict[int, int] = {}  # parent id -> its run's offset from the gap's middle
    for e in sorted(tree["edges"], key=lambda e: pos.get(e["from"], (0.0, 0))[::-1]):
        if e["kind"] != "lineage" and e["from"] in pos and e["from"] not in lane:
            row = [p for p in lane if pos[p][1] == pos[e["from"]][1]]
            lane[e["from"]] = STAGGER[len(row) % len(STAGGER)]
    edges = []
    for e in tree["edges"]:
        if e["from"] not in pos or e["to"] not in pos:
            continue
        (x1, y1), (x2, y2) = pos[e["from"]], pos[e["to"]]
        r1 = LEADER_RADIUS if by_id[e["from"]].get("leader") else RADIUS
        r2 = LEADER_RADIUS if by_id[e["to"]].get("leader") else RADIUS
        if first_parent.get(e["to"]) == e["from"] and y2 == y1 + ROW:
            mid = y2 - ROW // 2 + (0 if e["kind"] == "lineage" else lane.get(e["from"], STAGGER[0]))
            d = f"M{x1},{y1 + r1} V{mid} H{x2} V{y2 - r2}"
        else:  # a second parent: a curve
            d = f"M{x1},{y1 + r1} C{x1},{y1 + ROW} {x2},{y2 - ROW} {x2},{y2 - r2}"
        edges.append({**e, "d": d})
    total = max(x0 - GAP, BAND_MIN)
    height = TOP + (max(depth.values(), default=0) + 1) * ROW
    return {"nodes": placed, "edges": edges, "bands": bands, "width": round(total), "height": height}
