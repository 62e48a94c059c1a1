"""The example traces in examples/ (real H200 sessions) import as read-only sessions and
export again byte for byte; every session trace examples/ ships is read under the default
limit; `socratic trace kernel` takes a leader out of one; the all-182 table in docs/agents.md
quotes the summaries and traces examples/agent-v2 ships."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

import pytest

from app.domain.audit.attribution import attribute
from app.domain.audit.record import load_record
from app.domain.audit.summary import audit_text
from app.domain.audit.trace_io import export_session, import_trace, parse_trace, trace_text
from app.settings import PROJECT_ROOT, Settings
from app.store.database import Database

EXAMPLES = sorted((PROJECT_ROOT / "examples").glob("*.jsonl"))


@pytest.mark.skipif(not EXAMPLES, reason="no example trace in examples/")
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_trace_round_trips_and_can_be_audited(path: Path, database: Database) -> None:
    text = path.read_text(encoding="ascii")
    with database.session() as db:
        session = import_trace(db, text, path.name)
        db.commit()
        sid = session.id or 0
        assert export_session(db, sid) == text
        record = load_record(db, sid)
        assert record.session.read_only and record.candidates
        assert attribute(record).steps  # at least one judged candidate


def test_the_silent_example_audits_as_a_control_and_the_bank_example_does_not(database: Database) -> None:
    silent, asked = (PROJECT_ROOT / "examples" / name for name in
                     ("h200-offline-silent.jsonl", "h200-offline-bank-questions.jsonl"))
    with database.session() as db:
        quiet = import_trace(db, silent.read_text(encoding="ascii"), silent.name)
        steered = import_trace(db, asked.read_text(encoding="ascii"), asked.name)
        db.commit()
        control = attribute(load_record(db, quiet.id or 0))
        bank = attribute(load_record(db, steered.id or 0))
        text = audit_text(load_record(db, quiet.id or 0))
    # seven plateau pauses resumed without a message, none followed by a new leader
    assert (control.silent.uses, control.silent.credited, control.silent.hit_rate) == (7, 7, 0.0)
    assert control.silent.geomean_gain == 1.0 and not control.interventions
    assert "silent control (pauses resumed without a message): 7 credited, geomean gain 1.000x" in text
    # every pause of the bank session was answered by a question: none of them is a control
    assert bank.silent.uses == 0 and len(bank.credited("question")) == 7
    assert bank.by_kind["question"].interval is not None


SHIPPED = sorted(p for p in (PROJECT_ROOT / "examples").rglob("*.jsonl*") if "campaigns" not in p.parts)


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(PROJECT_ROOT / "examples")) for p in SHIPPED])
def test_every_shipped_session_trace_is_read_under_the_default_limit(path: Path) -> None:
    """What examples/ ships, `socratic trace import` and the import page take as the server
    comes (SOCRATIC_TRACE_MAX_BYTES unset): a proof's trace outgrowing the limit is a refused
    example, not a larger number in a README."""
    default = Settings.model_fields["trace_max_bytes"].default
    parsed = parse_trace(trace_text(path.read_bytes(), default))
    assert parsed.rows["candidate"]


def test_trace_kernel_writes_a_trace_s_leader_or_a_named_candidate(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`socratic trace kernel`: the source of the leader the session recorded (its leader_id),
    byte for byte, to judge it again without importing the trace; a candidate by number; a
    number the session does not have, and a damaged file, are said and write nothing."""
    from app.faces.commands.cli import main as socratic

    path = PROJECT_ROOT / "examples" / "agent-v2" / "all182-autonomous.jsonl.xz"
    parsed = parse_trace(trace_text(path.read_bytes(), 2**26))
    candidates = {c["number"]: c for _line, c in parsed.rows["candidate"]}
    leader = next(c for c in candidates.values() if c["id"] == parsed.session["leader_id"])
    assert leader["number"] == 39  # the stalled leader of docs/lab/2026-12-06-all182-gpu.md
    out = tmp_path / "leader.cu"
    assert socratic(["trace", "kernel", str(path), "-o", str(out)]) == 0
    assert out.read_text() == leader["source"]
    assert "wrote candidate #39 (the leader, 20.85x baseline)" in capsys.readouterr().err
    assert socratic(["trace", "kernel", str(path), "--candidate", "3"]) == 0
    assert capsys.readouterr().out == candidates[3]["source"]
    assert socratic(["trace", "kernel", str(path), "--candidate", "999", "-o", str(tmp_path / "no.cu")]) == 1
    assert "no candidate #999 (its candidates: #1 to #54)" in capsys.readouterr().err
    damaged = tmp_path / "cut.jsonl"
    damaged.write_text("\n".join(lzma.decompress(path.read_bytes()).decode().splitlines()[:-5]) + "\n")
    assert socratic(["trace", "kernel", str(damaged), "-o", str(tmp_path / "cut.cu")]) == 1
    assert "truncated or was edited" in capsys.readouterr().err
    assert not (tmp_path / "no.cu").exists() and not (tmp_path / "cut.cu").exists()
    assert socratic(["trace", "kernel", str(path), "-o", str(tmp_path / "no-such-dir" / "k.cu")]) == 1
    assert "No such file or directory" in capsys.readouterr().err


def test_the_all_182_table_in_docs_agents_md_is_the_shipped_runs_numbers() -> None:
    """Issue 50's all-182 table quotes what examples/agent-v2 ships: each row's x FA3 / x cuDNN /
    x FA2 is its summary's side-by-side judgement on all 182, and each arm's leader # is the
    leader its trace recorded, so neither a retyped number nor a swapped trace goes unnoticed."""
    v2 = PROJECT_ROOT / "examples" / "agent-v2"

    def summary(name: str) -> dict[str, dict[str, Any]]:
        return {r["arm"]: r for r in json.loads((v2 / name).read_text())["rows"]}

    def ratios(r: dict[str, Any]) -> str:
        return " / ".join(f"{r[k]:.3f}" for k in ("x_fa3", "x_cudnn", "x_fa2"))

    def leader(trace: str) -> int:
        parsed = parse_trace(trace_text((v2 / trace).read_bytes(), 2**26))
        return next(int(c["number"]) for _line, c in parsed.rows["candidate"]
                    if c["id"] == parsed.session["leader_id"])

    seed1, judged = summary("summary-all182.json"), summary("summary-all182-judged.json")
    s2, s2_greedy = summary("summary-all182-s2.json")["all-182"], summary("summary-all182-s2-greedy.json")["greedy-182"]
    assert seed1["all-182"]["all_182_side_by_side"]["x_fa3"] == round(judged["all-182-39"]["x_fa3"], 3)
    expected = {  # (arm, seed) -> (leader #, its trace's leader, ratios on all 182)
        ("measured, autonomous (`all-182`)", "1"):
            (seed1["all-182"]["leader"], leader("all182-autonomous.jsonl.xz"), ratios(judged["all-182-39"])),
        ("greedy (`greedy-182`, the control)", "1"):
            (seed1["greedy-182"]["leader"], leader("all182-greedy.jsonl.xz"),
             ratios(seed1["greedy-182"]["all_182_side_by_side"])),
        ("measured, autonomous (`all-182`)", "2"): (s2["leader"], leader("all182-s2-autonomous.jsonl.xz"), ratios(s2)),
        ("greedy (`greedy-182`, the control)", "2"):
            (s2_greedy["leader"], leader("all182-s2-greedy.jsonl.xz"), ratios(s2_greedy)),
    }
    text = (PROJECT_ROOT / "docs" / "agents.md").read_text()
    table = text[text.index("| arm | seed | evaluations | leader # | on all 182, side by side"):].split("\n\n")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    found = {(r[0], r[1]): (r[3], r[4]) for r in rows if r[1] != "-"}
    assert set(found) == set(expected)
    for key, (number, traced, side_by_side) in expected.items():
        assert number == traced, key
        assert found[key] == (str(number), side_by_side), key
    gallery = next(r for r in rows if r[0].startswith("gallery"))
    assert gallery[4] == ratios(judged["gallery"])
    for row in (s2, s2_greedy, judged["all-182-39"]):
        assert row["passed"] == "182/182" and row["card"] == "NVIDIA H100 80GB HBM3"
