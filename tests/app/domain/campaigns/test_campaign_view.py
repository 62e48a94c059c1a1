"""The campaign page's data says plainly what it shows (issue 49, point 9), on the shipped H200
campaigns (imported read-only, as anyone can): one name per agent everywhere; counts that add up,
with a legend saying why the budget's 12 are not the agents' 15 or 16; board effects that name
the kernel they are measured against, read back the way the board chose it; neutral states for
finished agents; and a tree whose edges each span one generation and cross no label."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from app.domain.campaigns.views import member_state
from app.faces.web.campaign_tree import RADIUS, ROW, tree_layout
from app.store.campaign_models import Campaign
from app.store.models import Candidate
from kernels.attention.family.render import recorded_knobs
from tests.server_support import ROOT, running_app

EXAMPLES = ROOT / "examples/campaigns"
BOARD = EXAMPLES / "h200-2026-12-01-board-v2/h200-board-seed0.jsonl.xz"
EVOLUTION = EXAMPLES / "h200-2026-12-01-judge-fixed/h200-evolution-seed0.jsonl.xz"


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], dict[str, Any], Any]]:
    if not (BOARD.exists() and EVOLUTION.exists()):
        pytest.skip("the example campaign traces are not in examples/")
    with running_app(tmp_path_factory.mktemp("campaign-view")) as client:
        out = []
        for path in (BOARD, EVOLUTION):
            r = client.post("/api/campaigns/import", files={"file": (path.name, path.read_bytes())})
            assert r.status_code == 201, r.text
            out.append(client.get(f"/api/campaigns/{r.json()['id']}").json())
        yield out[0], out[1], client


def test_every_agent_goes_by_one_name_everywhere(views: tuple[dict[str, Any], dict[str, Any], Any]) -> None:
    for view in views[:2]:
        names = {r["name"] for r in view["leaderboard"]}
        assert len(names) == 4 and all(re.fullmatch(r"agent \d \(\w+, seed \d\)", n) for n in names)
        assert [a["name"] for a in view["tree"]["agents"]] == sorted(names)  # the members in order
        assert {n["agent"] for n in view["tree"]["nodes"]} == names
        assert {e["author"] for e in view["board"]} == names
        assert view["leader"]["agent"] in names
    assert views[0]["leader"]["agent"] == "agent 3 (math, seed 2)" and views[0]["leader"]["number"] == 4


def test_the_counts_add_up_and_the_legend_says_why(views: tuple[dict[str, Any], dict[str, Any], Any]) -> None:
    board, evolution, _ = views
    counts, rows = board["counts"], board["leaderboard"]
    assert (counts["campaign"], counts["budget"], counts["judged"]) == (12, 12, 15)
    assert counts["judged"] == sum(r["evaluations"] for r in rows)  # the agents' own counts
    assert counts["counted"] == sum(r["counted"] for r in rows) == board["evaluations"] == 12
    assert (counts["common_start"], counts["after_end"], counts["unposted"]) == (3, 0, 0)
    assert all(r["evaluations"] == r["counted"] + r["common_start"] + r["after_end"] + r["unposted"] for r in rows)
    assert "counts 12 evaluations of a budget of 12" in counts["legend"]
    assert "add up to 15" in counts["legend"] and "3 repeats of the agents' common first kernel" in counts["legend"]
    assert "cancelled before its verdict counts nowhere" in counts["legend"]
    # The evolution campaign judged one kernel after its budget was spent: said, not counted.
    c = evolution["counts"]
    assert (c["campaign"], c["judged"], c["common_start"], c["after_end"]) == (12, 16, 3, 1)
    assert "1 judged after the budget was spent" in c["legend"]


def test_effects_name_what_they_are_measured_against(views: tuple[dict[str, Any], dict[str, Any], Any]) -> None:
    board, evolution, client = views
    labels = {(e["author"].split(" (")[0], e["candidate"]): e["compared_with"]["label"] for e in board["board"]}
    assert labels["agent 2", 2] == "vs its parent #1"  # smem_layout=swizzle over its own first port
    assert labels["agent 2", 4] == "vs #3, the nearest kernel measured"  # mma=wgmma, built on its #3
    assert labels["agent 1", 3] == "vs agent 3 (math, seed 2) #2, the nearest kernel measured"  # from the board
    assert all(labels[agent, 1] == "over the baseline (a first kernel)" for agent in ("agent 1", "agent 2"))
    assert any("the parent the judge chose" in e["compared_with"]["label"] for e in evolution["board"])
    # Read back as the board chose it: against that kernel, the change is exactly the entry's knobs.
    engine = client.app.state.engine
    with engine.ctx.database.session() as db:
        for view in views[:2]:
            for e in view["board"]:
                basis = e["compared_with"]
                if basis["candidate_id"] is None:
                    assert e["candidate"] == 1
                    continue
                mine = db.exec(select(Candidate).where(Candidate.session_id == e["session_id"],
                                                       Candidate.number == e["candidate"])).one()
                theirs = db.get(Candidate, basis["candidate_id"])
                assert theirs is not None
                a, b = recorded_knobs(mine.source) or {}, recorded_knobs(theirs.source) or {}
                assert {k: v for k, v in a.items() if b.get(k) != v} == e["knobs"], (e["author"], e["candidate"])
    # The tree draws what a kernel followed from the board as an edge of its own.
    assert {e["kind"] for e in board["tree"]["edges"]} == {"lineage", "board"}
    assert {e["kind"] for e in evolution["tree"]["edges"]} >= {"mutation"}


def test_finished_agents_are_neutral_and_only_a_failed_one_is_red(
        views: tuple[dict[str, Any], dict[str, Any], Any]) -> None:
    assert {(r["state"], r["state_tone"]) for r in views[0]["leaderboard"]} == {("finished", "neutral")}
    active, finished = Campaign(title="a"), Campaign(title="f", status="finished")
    assert member_state("stopped", finished) == ("finished", "neutral")
    assert member_state("done", active) == ("finished", "neutral")
    assert member_state("stopped", active) == ("stopped", "neutral")  # a person stopped it
    assert member_state("failed", finished) == ("failed", "bad")
    assert member_state("running", active) == ("running", "running")


def label_box(n: dict[str, Any]) -> tuple[float, float, float, float]:
    """Where a node's label is drawn (11 px text, at most 6.6 px a character), as the template places it."""
    x = n["x"] + n["r"] + 4
    return x, n["y"] - 9, x + 6.6 * len(n["label"]), n["y"] + 5


def segments(d: str) -> list[tuple[float, float, float, float]]:
    """The straight pieces of an edge's path (M x,y V y H x V y)."""
    parts = re.findall(r"([MVH])([-\d.]+)(?:,([-\d.]+))?", d)
    assert len(parts) == 4 and "C" not in d, d
    x, y = float(parts[0][1]), float(parts[0][2])
    out = []
    for op, a, _ in parts[1:]:
        nx, ny = (x, float(a)) if op == "V" else (float(a), y)
        out.append((min(x, nx), min(y, ny), max(x, nx), max(y, ny)))
        x, y = nx, ny
    return out


def crosses(seg: tuple[float, float, float, float], box: tuple[float, float, float, float]) -> bool:
    return seg[0] <= box[2] and box[0] <= seg[2] and seg[1] <= box[3] and box[1] <= seg[3]


def test_the_tree_lays_out_by_generation_and_no_edge_crosses_a_label(
        views: tuple[dict[str, Any], dict[str, Any], Any]) -> None:
    for view in views[:2]:
        layout = tree_layout(view["tree"])
        nodes = {n["id"]: n for n in layout["nodes"]}
        assert len(nodes) == len(view["tree"]["nodes"]) and len(layout["edges"]) == len(view["tree"]["edges"])
        bands = {b["session_id"]: b for b in layout["bands"]}
        assert [b["name"] for b in layout["bands"]] == [a["name"] for a in view["tree"]["agents"]]
        for n in nodes.values():  # in its agent's band, label included
            band = bands[n["session_id"]]
            assert band["x"] <= n["x"] - n["r"] and label_box(n)[2] <= band["x"] + band["width"], n["label"]
        for i, a in enumerate(nodes.values()):  # nodes and labels apart
            for b in list(nodes.values())[i + 1:]:
                assert not crosses(label_box(a), label_box(b)), (a["label"], b["label"])
                assert abs(a["x"] - b["x"]) > 2 * RADIUS or a["y"] != b["y"]
        for e in layout["edges"]:
            src, dst = nodes[e["from"]], nodes[e["to"]]
            assert dst["y"] - src["y"] == ROW  # one generation
            for seg in segments(e["d"]):
                for n in nodes.values():
                    assert not crosses(seg, label_box(n)), (e, n["label"])
                    if n["id"] not in (e["from"], e["to"]):
                        circle = (n["x"] - n["r"], n["y"] - n["r"], n["x"] + n["r"], n["y"] + n["r"])
                        assert not crosses(seg, circle), (e, n["label"])
        assert layout["width"] >= 4 * 170 and layout["height"] >= 3 * ROW


def test_a_tree_without_kernels_or_with_a_circle_still_draws() -> None:
    empty = tree_layout({"nodes": [], "edges": [], "agents": [{"session_id": 1, "name": "agent 1 (tiling, seed 0)"}]})
    assert empty["bands"][0]["empty"] and empty["bands"][0]["lines"] == ["agent 1", "(tiling, seed 0)"]
    node = {"session_id": 1, "agent": "a", "title": "", "speedup": 2.0, "verdict": "leader", "ghost": False,
            "leader": False, "status": "evaluated"}
    circle = tree_layout({"nodes": [{**node, "id": 1, "number": 1}, {**node, "id": 2, "number": 2}],
                          "edges": [{"from": 1, "to": 2, "kind": "lineage"}, {"from": 2, "to": 1, "kind": "lineage"}]})
    assert len(circle["nodes"]) == 2 and len(circle["edges"]) == 2


def test_the_page_draws_it(views: tuple[dict[str, Any], dict[str, Any], Any], tmp_path: Path) -> None:
    client = views[2]
    html = client.get(f"/campaigns/{views[0]['id']}").text
    assert 'id="counts-legend"' in html and "vs its parent #1" in html and "12 / 12 evaluations" in html
    assert html.count('class="badge member-state state-finished tone-neutral"') == 4
    assert 'hx-trigger="every 3s"' not in html  # a finished (imported) campaign is not polled
    assert '<script src="/static/tree_zoom.js"></script>' in html
