"""Compare sets leaders side by side only over the scenarios their sessions share: a session that
ran 10 scenarios and one that ran 5 of them are compared over those 5, the page says so, and
sessions that share none are refused a comparison of their geomeans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.domain.audit.compare import compare
from app.domain.audit.record import load_record
from app.domain.audit.trace_io import import_trace
from app.settings import PROJECT_ROOT, Settings
from app.store.database import open_database
from harness.stats import geomean
from tests.server_support import running_app

TRACE = PROJECT_ROOT / "examples" / "h200-offline-silent.jsonl"


def trimmed(text: str, keep: int | None = None, drop: int | None = None) -> str:
    """The trace with every evaluation's report (and the session's scenario list) cut to its first
    `keep` scenarios, or to all but its first `drop`."""
    def cut(items: list[dict[str, object]]) -> list[dict[str, object]]:
        return items[:keep] if keep is not None else items[drop or 0:]

    out = []
    for line in text.splitlines():
        record = json.loads(line)
        if record["type"] == "session":
            record["scenarios"] = cut(record["scenarios"])
        if record["type"] == "evaluation":
            report = record["report"]
            report["scenarios"] = cut(report["scenarios"])
            report.pop("geomean", None)  # recomputed from the rows that are left
        if record["type"] == "candidate" and record.get("scenario_count"):
            kept = len(cut([{}] * int(record["scenario_count"])))
            record["passed"] = min(int(record.get("passed") or 0), kept)
            record["scenario_count"] = kept
        out.append(json.dumps(record))
    return "\n".join(out) + "\n"


@pytest.fixture
def traces() -> str:
    if not TRACE.is_file():
        pytest.skip("examples/ lacks the silent example trace")
    return TRACE.read_text()


def import_all(tmp_path: Path, *texts: str) -> tuple[Settings, list[int]]:
    settings = Settings(data_dir=tmp_path, db_url=f"sqlite:///{tmp_path / 'c.db'}", bank_semantic_search=False)
    database = open_database(settings)
    ids = []
    with database.session() as db:
        for i, text in enumerate(texts):
            ids.append(import_trace(db, text, f"trace-{i}.jsonl").id or 0)
        db.commit()
    database.dispose()
    return settings, ids


def test_leaders_of_different_scenario_sets_are_compared_over_the_shared_ones(tmp_path: Path, traces: str) -> None:
    settings, (full, half) = import_all(tmp_path, traces, trimmed(traces, keep=5))
    database = open_database(settings)
    with database.session() as db:
        records = [load_record(db, full), load_record(db, half)]
    cmp = compare(records)
    a, b = cmp.arms
    assert a.own is not None and b.own is not None and a.stats is not None and b.stats is not None
    assert (a.own.scenarios, b.own.scenarios) == (10, 5)
    assert cmp.shared == sorted(b.own.evaluated) and len(cmp.shared) == 5 and not cmp.same_sets
    # The full session's ratio is recomputed over the five shared scenarios, not its own ten.
    shared_rows = [a.own.rows[n].vs_baseline for n in cmp.shared]
    assert a.stats.scenarios == 5 and a.stats.vs_baseline == pytest.approx(geomean(shared_rows))
    assert a.stats.vs_baseline != pytest.approx(a.own.vs_baseline)
    assert set(a.stats.times) == set(b.stats.times) == set(cmp.shared)  # the heatmap too
    assert cmp.warning == ""


def test_sessions_that_share_no_scenario_are_refused_a_comparison(tmp_path: Path, traces: str) -> None:
    settings, (first, rest) = import_all(tmp_path, trimmed(traces, keep=5), trimmed(traces, drop=5))
    database = open_database(settings)
    with database.session() as db:
        cmp = compare([load_record(db, first), load_record(db, rest)])
    assert cmp.shared == [] and "share no scenario" in cmp.warning


def test_the_compare_page_names_the_shared_count_and_each_own_set(tmp_path: Path, traces: str) -> None:
    with running_app(tmp_path, bank_semantic_search=False) as client:
        ids = []
        for i, text in enumerate((traces, trimmed(traces, keep=5))):
            r = client.post("/traces/import", files={"trace": (f"t{i}.jsonl", text.encode(), "application/x-ndjson")},
                            follow_redirects=False)
            assert r.status_code == 303, r.text
            ids.append(int(r.headers["location"].split("/")[2]))
        page = client.get(f"/compare?s={ids[0]}&s={ids[1]}").text
        same = client.get(f"/compare?s={ids[0]}&s={ids[0]}").text
    assert "over the <b>5 scenarios they share</b>" in page
    assert f"#{ids[0]} ran 10, #{ids[1]} ran 5" in page
    assert "× baseline, own set" in page and 'class="num arm-scenarios">10/10<' not in page
    assert page.count('class="num arm-scenarios">5/5<') == 2
    assert "NVIDIA H200" in page
    assert "own set" not in same


def test_the_dashboard_labels_each_leader_with_its_scenarios_and_gpu(tmp_path: Path, traces: str) -> None:
    with running_app(tmp_path, bank_semantic_search=False) as client:
        for i, text in enumerate((traces, trimmed(traces, keep=5))):
            r = client.post("/traces/import", files={"trace": (f"t{i}.jsonl", text.encode(), "application/x-ndjson")},
                            follow_redirects=False)
            assert r.status_code == 303, r.text
        page = client.get("/").text
    assert "over 10 scenarios, NVIDIA H200" in page and "over 5 scenarios, NVIDIA H200" in page
