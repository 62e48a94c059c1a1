"""scripts/agent_v2_proof.py end to end on the CPU (`--cpu-standin`): three arms, each a session
through a real server's HTTP API in its own process (the synthetic H100 as its evaluator), the
leaders evaluated again, the traces exported and the table printed, labelled as a stand-in. The
third arm reads the lessons distilled from the first arm's trace (issue 46's memory measure)."""

from __future__ import annotations

import argparse
import json
import lzma
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT


def test_the_proof_runs_every_arm_through_the_http_api_and_prints_the_table(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "scripts/agent_v2_proof.py", "--cpu-standin", "--out", str(tmp_path / "out"),
         "--traces", str(tmp_path / "traces"), "--evaluations", "6", "--poll-s", "0.2",
         "--arms", "autonomous,greedy,remembered"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "CPU STAND-IN" in out.stdout and "| arm | scenarios | card |" in out.stdout
    assert "| autonomous | category=prefill |" in out.stdout  # each arm names its own scenarios
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    rows = {r["arm"]: r for r in summary["rows"]}
    assert set(rows) == {"autonomous", "remembered", "greedy"}
    assert all(r["evaluations"] >= 6 and r["card"] == "synthetic H100" for r in rows.values())
    assert {rows["autonomous"]["strategy"], rows["greedy"]["strategy"]} == {"measured", "greedy"}
    # on the synthetic H100 the profile sends the measured agent to wgmma at once; greedy stays in tiling
    assert rows["autonomous"]["x_baseline"] > 1.5 * rows["greedy"]["x_baseline"]
    assert rows["remembered"]["lessons_given"] > 0 and rows["remembered"]["lesson_moves"] > 0
    assert rows["autonomous"]["lesson_moves"] == 0 and "memory: the first arm's final leader" in out.stdout
    for arm in rows:
        trace = (tmp_path / "traces" / f"cpu-standin-{arm}.jsonl.xz").read_bytes()
        lines = lzma.decompress(trace).decode().splitlines()
        assert json.loads(lines[0])["type"] and any('"session_created"' in line for line in lines)


def test_together_runs_the_arms_as_sessions_of_one_server_at_once(tmp_path: Path) -> None:
    """`--together`: one server, one database, every arm its own session driven at the same time
    (they share the one GPU through the server's device queue), each to its own budget."""
    out = subprocess.run(
        [sys.executable, "scripts/agent_v2_proof.py", "--cpu-standin", "--together", "--no-final",
         "--out", str(tmp_path / "out"), "--traces", str(tmp_path / "traces"), "--evaluations", "4",
         "--poll-s", "0.2", "--arms", "autonomous,greedy"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = {arm: json.loads((tmp_path / "out" / arm / "result.json").read_text())
               for arm in ("autonomous", "greedy")}
    assert {r["session"] for r in results.values()} == {1, 2}  # two sessions of the one database
    assert all(r["evaluations"] >= 4 and r["stopped_because"] == "budget of 4 evaluations" for r in results.values())
    assert (tmp_path / "out" / "together" / "data" / "socratic.db").is_file()
    assert not (tmp_path / "out" / "autonomous" / "data").exists()
    for arm, r in results.items():  # each trace is its own session's
        trace = (tmp_path / "traces" / f"cpu-standin-{arm}.jsonl.xz").read_bytes()
        lines = lzma.decompress(trace).decode().splitlines()
        session = json.loads(lines[1])
        assert session["id"] == r["session"] and session["agent_config"]["strategy"] == r["strategy"]
    again = subprocess.run(
        [sys.executable, "scripts/agent_v2_proof.py", "--cpu-standin", "--together", "--no-final",
         "--out", str(tmp_path / "out"), "--arms", "autonomous"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "pass --resume" in again.stdout + again.stderr
    # an arm that ran together, resumed alone, would start a fresh session whose leader stands for the
    # interrupted one in the final table (the H100 run of 2026-12-06): refused before any server starts
    alone = subprocess.run(
        [sys.executable, "scripts/agent_v2_proof.py", "--cpu-standin", "--resume", "--no-final",
         "--out", str(tmp_path / "out"), "--arms", "autonomous"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert alone.returncode != 0 and "resume with --together" in alone.stdout + alone.stderr
    assert not (tmp_path / "out" / "autonomous" / "data" / "socratic.db").exists()
    nothing = subprocess.run(
        [sys.executable, "scripts/agent_v2_proof.py", "--cpu-standin", "--resume", "--together", "--no-final",
         "--out", str(tmp_path / "empty"), "--arms", "autonomous"], cwd=ROOT, capture_output=True, text=True,
        timeout=60)
    assert nothing.returncode != 0 and "no run is there" in nothing.stdout + nothing.stderr


def test_the_all_182_arm_searches_on_a_third_of_the_suite_and_is_judged_on_all_of_it(tmp_path: Path) -> None:
    """Issue 50's third run: the session's own scenarios are every third of the suite (61: every
    category and head dim), its budget 60 evaluations; the final table judges its leader on all 182."""
    from harness.attention.suite import default_suite
    from scripts.agent_v2_proof import ARMS, budget, sampled

    chosen = sampled(3)
    assert len(chosen) == 61 and {s["category"] for s in chosen} == {s.category for s in default_suite()}
    assert {s["head_dim"] for s in chosen} == {s.head_dim for s in default_suite()}
    assert budget("all-182", argparse.Namespace(evaluations=40, transfer_evaluations=20)) == 60
    assert ARMS["greedy-182"]["sample_every"] == ARMS["all-182"]["sample_every"]
    # relative --out and --traces, run from elsewhere: the final reads the leader back by its path
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "agent_v2_proof.py"), "--cpu-standin", "--out", "out",
         "--traces", "traces", "--poll-s", "0.2", "--arms", "all-182", "--deadline-s", "20"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "| all-182 | all (searched on 1 scenario in 3 (61)) | synthetic H100 |" in out.stdout
    row = json.loads((tmp_path / "out" / "summary.json").read_text())["rows"][0]
    assert row["x_baseline"] > 1
    # a miss must say where: x FA3 per category, each from that category's own scenarios
    assert set(row["fa3_by_category"]) == {s.category for s in default_suite()}
    assert all(v > 0 for v in row["fa3_by_category"].values())
    assert min(row["fa3_by_category"].values()) <= row["x_fa3"] <= max(row["fa3_by_category"].values())
    assert "all-182: x FA3 by category: chunked " in out.stdout
    # the final streams: a line every 20 scenarios and the row as soon as it is measured
    assert "[final] all-182: 180/182 scenarios (" in out.stdout
    assert "[final] all-182: 182/182 passed, x FA3 " in out.stdout
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["complete"] is True
    trace = lzma.decompress((tmp_path / "traces" / "cpu-standin-all-182.jsonl.xz").read_bytes()).decode()
    session = json.loads(trace.splitlines()[1])
    assert session["suite_filter"] is None and len(session["scenarios"]) == 61


def test_the_final_writes_each_kernel_s_row_as_soon_as_it_is_measured(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A device call cut at its limit must still bring back the kernels judged before the cut:
    summary.json holds every row measured so far (`complete` false until the table is printed)."""
    import scripts.agent_v2_proof as proof

    args = argparse.Namespace(cpu_standin=True, out=tmp_path, filter="category=decode", seed=1)
    gallery = ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-n.cu"
    baseline = ROOT / "kernels" / "attention" / "baseline.cu"
    results = [proof.reference(f"gallery={gallery}", args), proof.reference(f"baseline={baseline}", args)]
    on_disk_before: list[Any] = []  # summary.json as each evaluation starts
    evaluate = proof.evaluate_leader

    def watched(*a: Any, **kw: Any) -> Any:
        target = tmp_path / "summary.json"
        on_disk_before.append(json.loads(target.read_text()) if target.exists() else None)
        return evaluate(*a, **kw)

    monkeypatch.setattr(proof, "evaluate_leader", watched)
    rows = proof.final_table(results, args)
    assert on_disk_before[0] is None
    assert on_disk_before[1]["complete"] is False and [r["arm"] for r in on_disk_before[1]["rows"]] == ["gallery"]
    kept = json.loads((tmp_path / "summary.json").read_text())
    assert kept["complete"] is False and kept["rows"] == json.loads(json.dumps(rows, default=str))
    assert kept["rows"][0]["x_fa3"] > kept["rows"][1]["x_fa3"] > 0  # the gallery leader is the synthetic FA3


def test_the_final_s_progress_lines_say_where_a_long_evaluation_is(capsys: pytest.CaptureFixture[str]) -> None:
    """Every 20th scenario and the last; the evaluation's messages (a fresh machine fills its
    baseline cache first) at most one per quiet spell, so a cut log still says where it was."""
    from harness.executor import Progress
    from harness.report import PASS, ScenarioResult
    from scripts.agent_v2_proof import final_progress

    show = final_progress("all-182-39", t0=0.0, quiet_s=3600)
    show(Progress(0, 182, "", None, "worker ready on NVIDIA H100 80GB HBM3"))
    show(Progress(182, 182, "d", None, "filling the baseline cache 1/182: d"))  # within the quiet spell
    for i in range(1, 183):
        show(Progress(i, 182, f"s{i}", ScenarioResult(f"s{i}", "prefill", False, PASS)))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[final] all-182-39: worker ready on NVIDIA H100 80GB HBM3, ")
    assert [line.split(" scenarios")[0].rsplit(" ", 1)[1] for line in lines[1:]] == [
        f"{n}/182" for n in (*range(20, 182, 20), 182)]
