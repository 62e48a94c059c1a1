"""The proof of issue 50 ("An agent that measures"), run on a GPU by the lead: each arm is one
session of the offline agent through a real server's HTTP API (`python -m app serve` on loopback,
in a subprocess with its own data dir and an empty bank history), from the first port, with no
gallery knowledge, on the same scenarios and evaluation budget:

  autonomous   the second version (strategy measured): no message, no auto-ask; every pause is
               resumed without a word
  bank         the second version with the bank answering every pause (auto-ask at once)
  greedy       today's agent (strategy greedy), every pause resumed without a word (the control)
  greedy-bank  today's agent with the bank answering every pause (optional)
  all-182      the second version autonomous on every third scenario of the suite (61, every
               category and head dim) for 60 evaluations; its leader is judged on all 182
  greedy-182   today's agent on the same 61 and budget (the all-182 arm's control)

Then the final leaders are evaluated one after the other in this process, with FA3, cuDNN and
FA2 timed side by side (`harness.evaluate.evaluate_source`, peers cudnn, flash, fa3), the traces
are exported to `--traces` (examples/agent-v2/ by default, as `python -m app trace export` writes
them, xz-compressed), and a
table is printed: leader x baseline, x FA3, x cuDNN, x FA2, and the evaluations it took to reach
that leader. `summary.json` in `--out` keeps the same.

On a GPU machine (one arm per device call fits ten minutes, `--deadline-s` leaves the session to
be continued with `--resume` in the next call when `--out` is kept between calls, e.g. an ignored
folder of the working tree; `--final` then evaluates the saved leaders side by side and prints the
table):

    PYTHONPATH=. python3 scripts/agent_v2_proof.py --out $OUT/v2 --arms autonomous \
        --filter category=prefill --evaluations 40 --deadline-s 540
    PYTHONPATH=. python3 scripts/agent_v2_proof.py --out $OUT/v2 --arms bank ...
    PYTHONPATH=. python3 scripts/agent_v2_proof.py --out $OUT/v2 --arms greedy ...
    PYTHONPATH=. python3 scripts/agent_v2_proof.py --out $OUT/v2 --final

On a host with several GPUs the three arms run at once, one GPU each (`--gpus 0,1,2`); the final
side-by-side evaluation of the leaders then runs on one GPU, so every ratio in the table is a
same-card ratio.

`--cpu-standin` runs the same machinery without a GPU: the server's evaluator is the synthetic
H100 of tests/family_model.py (real rendered kernels, made-up speeds, real profiles of synthetic
reports); its numbers prove that the machinery runs end to end, they are not a result, and the
output says so. `--serve-standin` is that server (what `--cpu-standin` starts in a subprocess).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from harness.executor import Progress, ProgressFn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TRANSFER_FILTER = "category=gqa,head_dim=128"
ARMS: dict[str, dict[str, Any]] = {
    "autonomous": {"strategy": "measured", "auto_ask": False},
    "bank": {"strategy": "measured", "auto_ask": True},
    "greedy": {"strategy": "greedy", "auto_ask": False},
    "greedy-bank": {"strategy": "greedy", "auto_ask": True},
    # issue 46 (lessons): the same agent reading the lessons distilled from the autonomous arm's trace
    "remembered": {"strategy": "measured", "auto_ask": False, "lessons_from": "autonomous"},
    # ... and transfer: lessons from the prefill arm, a session on GQA, with and without them
    "gqa-plain": {"strategy": "measured", "auto_ask": False, "filter": TRANSFER_FILTER, "transfer": True},
    "gqa-lessons": {"strategy": "measured", "auto_ask": False, "filter": TRANSFER_FILTER, "transfer": True,
                    "lessons_from": "autonomous"},
    # issue 50's third run: the session searches on every third scenario of the suite (61, every
    # category and head dim), 60 evaluations; its leader is then evaluated on all 182
    "all-182": {"strategy": "measured", "auto_ask": False, "sample_every": 3, "evaluations": 60},
    "greedy-182": {"strategy": "greedy", "auto_ask": False, "sample_every": 3, "evaluations": 60},
}
ALL = "all"  # an arm's final filter: the whole suite
STANDIN_LABEL = ("CPU STAND-IN: every evaluation was answered by the synthetic H100 of tests/family_model.py, "
                 "not timed on a GPU. This proves the machinery runs end to end; it is NOT a result.")
FINAL_STATES = ("done", "stopped", "failed")
# The paused agent has nothing left to measure when it pauses this often with no evaluation between.
IDLE_PAUSES = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_standin(port: int, data_dir: Path) -> None:
    """The real server (app/faces/web/app.py) with the synthetic H100 as its evaluator and a
    device queue that believes in a GPU; nothing else is replaced."""
    import uvicorn

    from app.faces.web.app import create_app
    from app.services.devices import DeviceQueue
    from app.settings import Settings
    from tests.family_model import SyntheticEvaluator

    # no embedding model warming up beside the sessions (keyword search is enough here)
    settings = Settings(data_dir=data_dir, port=port, log_level="warning", bank_semantic_search=False)
    app = create_app(settings, devices=DeviceQueue(poll_s=0.2, gpu_probe=lambda: True),
                     evaluator=SyntheticEvaluator(hopper=True, peers=True))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


class Server:
    """A server in its own process on a free loopback port, its log in a file."""

    def __init__(self, data_dir: Path, standin: bool, gpu: str | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.log = (data_dir / "server.log").open("w")
        cmd = ([sys.executable, str(Path(__file__).resolve()), "--serve-standin", "--port", str(self.port),
                "--data-dir", str(data_dir)] if standin else
               [sys.executable, "-m", "app", "serve", "--port", str(self.port), "--data-dir", str(data_dir)])
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               # no embedding model warming up beside nvcc: search as a person types is not used here
               "SOCRATIC_GPU_POLL_S": "1", "SOCRATIC_BANK_SEMANTIC_SEARCH": "false",
               **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {})}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.base}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the server did not start: " + (data_dir / "server.log").read_text()[-2000:])
            time.sleep(0.3)
        self.http = httpx.Client(base_url=self.base, timeout=60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def run_arm(arm: str, args: argparse.Namespace, out: Path, gpu: str | None = None) -> dict[str, Any]:
    """One session of `arm` through the HTTP API of its own server until its evaluation budget, its
    deadline, or an agent with nothing left to measure; returns what the table needs, and the
    trace's path."""
    spec = ARMS[arm]
    data_dir = out / arm / "data"
    existing = (data_dir / "socratic.db").exists()
    if existing and not args.resume:
        raise SystemExit(f"{data_dir} holds an earlier run of {arm}: pass --resume to go on with it, or another --out")
    if args.resume and not existing:
        refuse_resume(out, f"{data_dir} holds no run of {arm}")
    taught = 0
    if spec.get("lessons_from") and not existing:  # the lessons of an earlier arm's trace, before the server starts
        taught = distill_into(data_dir, Path(args.traces), spec["lessons_from"], args.cpu_standin)
    server = Server(data_dir, args.cpu_standin, gpu)
    t0 = time.monotonic()
    try:
        sid = open_session(server.http, arm, args, existing)
        why = drive(server.http, sid, spec["auto_ask"], args, t0, budget(arm, args))
        seen = conclude(server.http, sid, why)
    finally:
        server.close()
    return record(arm, args, out, data_dir, sid, why, seen, time.monotonic() - t0, taught)


def run_together(arms: list[str], args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Every arm a session of one server at the same time (`--together`): the server's device
    queue times one candidate at a time on this GPU, and one arm's nvcc runs while another's
    candidate is timed (app/engine/pipeline.py compiles before the queue). Each arm keeps its own
    evaluation budget; the deadline is the call's."""
    if any(ARMS[a].get("lessons_from") for a in arms):
        raise SystemExit("--together shares one database: arms given lessons need their own (run them alone)")
    data_dir = out / "together" / "data"
    existing = (data_dir / "socratic.db").exists()
    if existing and not args.resume:
        raise SystemExit(f"{data_dir} holds an earlier run: pass --resume to go on with it, or another --out")
    if args.resume and not existing:
        refuse_resume(out, f"{data_dir} holds no run of arms together")
    server = Server(data_dir, args.cpu_standin)
    t0 = time.monotonic()
    from concurrent.futures import ThreadPoolExecutor

    def one(arm: str) -> tuple[int, str, dict[str, Any]]:
        with httpx.Client(base_url=server.base, timeout=60) as http:
            sid = open_session(http, arm, args, existing)
            why = drive(http, sid, ARMS[arm]["auto_ask"], args, t0, budget(arm, args))
            return sid, why, conclude(http, sid, why)

    try:
        with ThreadPoolExecutor(len(arms)) as pool:
            done = list(pool.map(one, arms))
    finally:
        server.close()
    return [record(arm, args, out, data_dir, sid, why, seen, time.monotonic() - t0, 0)
            for arm, (sid, why, seen) in zip(arms, done, strict=True)]


def refuse_resume(out: Path, why: str) -> None:
    """`--resume` with nothing to go on with: a fresh session would start in its place, and its
    leader would stand for the interrupted one in the final table (it did on the H100, 2026-12-06:
    an arm run `--together` resumed alone). Says where the earlier run is."""
    together = (out / "together" / "data" / "socratic.db").exists()
    alone = sorted(d.name for d in out.glob("*") if (d / "data" / "socratic.db").exists() and d.name != "together")
    where = ("the arms ran together there: resume with --together" if together else
             f"runs there: {', '.join(alone)} (resume without --together)" if alone else "no run is there")
    raise SystemExit(f"--resume: {why}; {where}")


def open_session(http: httpx.Client, arm: str, args: argparse.Namespace, existing: bool) -> int:
    """The arm's session, created and started, or the one a deadline interrupted, resumed."""
    spec = ARMS[arm]
    title = f"agent v2 proof: {arm} (seed {args.seed})"
    earlier = [s for s in http.get("/api/sessions").json() if s["title"] == title] if existing else []
    if earlier:  # a run a deadline (the end of a device call) interrupted: resumed where it stopped
        sid = int(earlier[0]["id"])
        if earlier[0]["status"] in ("interrupted", "paused", "created"):
            http.post(f"/api/sessions/{sid}/resume" if earlier[0]["status"] != "created"
                      else f"/api/sessions/{sid}/start", json={"author": "proof"})
        return sid
    body = {"title": title, "agent": "offline",
            "agent_config": {"seed": args.seed, "strategy": spec["strategy"], "start": "first-port",
                             **({"lessons": bool(spec.get("lessons_from"))}
                                if spec["strategy"] == "measured" else {})},
            **({"scenarios": sampled(int(spec["sample_every"]))} if spec.get("sample_every")
               else {"suite_filter": arm_filter(arm, args)}),
            "start": False,
            "thresholds": {"plateau_window": args.plateau_window, "suspicious_jump": 50.0}}
    r = http.post("/api/sessions", json=body)
    r.raise_for_status()
    sid = int(r.json()["id"])
    if spec["auto_ask"]:
        http.put(f"/api/sessions/{sid}/auto-ask", json={"mode": "at_once", "max_in_a_row": 20}).raise_for_status()
    http.post(f"/api/sessions/{sid}/start").raise_for_status()
    return sid


def conclude(http: httpx.Client, sid: int, why: str) -> dict[str, Any]:
    """Stop the session (unless a deadline cut it: then it is left to be resumed, --resume) and
    read what the table needs: its state, candidates, the leader's source and profile, the notes."""
    if not why.startswith("deadline"):
        http.post(f"/api/sessions/{sid}/stop", json={"author": "proof"})
    state = http.get(f"/api/sessions/{sid}").json()
    cands = http.get(f"/api/sessions/{sid}/candidates").json()
    leader = state.get("leader_number")
    return {"state": state, "candidates": cands,
            "source": http.get(f"/api/sessions/{sid}/candidates/{leader}").json()["source"] if leader else "",
            "profile": http.get(f"/api/sessions/{sid}/candidates/{leader}/profile").json() if leader else {},
            "notes": [http.get(f"/api/sessions/{sid}/candidates/{c['number']}").json().get("notes", "")
                      for c in cands]}


def record(arm: str, args: argparse.Namespace, out: Path, data_dir: Path, sid: int, why: str,
           seen: dict[str, Any], seconds: float, taught: int) -> dict[str, Any]:
    """The arm's leader source, its trace exported from the (stopped) server's database, and its
    result.json."""
    spec, state, cands = ARMS[arm], seen["state"], seen["candidates"]
    leader, profile = state.get("leader_number"), seen["profile"]
    (out / arm).mkdir(parents=True, exist_ok=True)
    leader_path = out / arm / "leader.cu"
    leader_path.write_text(seen["source"])
    trace = export_trace(sid, data_dir, Path(args.traces), arm, args.cpu_standin)
    history = [(c["number"], c.get("speedup")) for c in cands if c.get("verdict") == "leader"]
    result = {"arm": arm, "strategy": spec["strategy"], "auto_ask": spec["auto_ask"], "session": sid,
              "evaluations": state.get("evaluations"), "stopped_because": why,
              "leader": leader, "leader_speedup": state.get("leader_speedup"), "leaders": history,
              "evaluations_to_leader": leader, "leader_source": str(leader_path),
              "diagnosis": profile.get("diagnosis", ""), "findings": [f["code"] for f in profile.get("findings", [])],
              "trace": str(trace), "seconds": round(seconds, 1), "filter": arm_filter(arm, args),
              **({"searched_on": f"1 scenario in {spec['sample_every']} ({len(sampled(spec['sample_every']))})"}
                 if spec.get("sample_every") else {}),
              "lessons_given": taught, "lesson_moves": sum("lesson #" in n for n in seen["notes"]),
              "speedups": [c.get("speedup") for c in cands]}
    (out / arm / "result.json").write_text(json.dumps(result, indent=1))
    print(f"[{arm}] {result['evaluations']} evaluations, leader #{leader} {result['leader_speedup'] or 0:.2f}x "
          f"baseline ({why}; {result['seconds']} s); diagnosis: {result['diagnosis']}", flush=True)
    return result


def arm_filter(arm: str, args: argparse.Namespace) -> str:
    """The scenarios an arm's leader is judged on in the final table (`ALL`: the whole suite)."""
    return ALL if ARMS[arm].get("sample_every") else str(ARMS[arm].get("filter") or args.filter)


def sampled(every: int) -> list[dict[str, Any]]:
    """Every `every`-th scenario of the suite, as a session's custom scenarios (ScenarioIn's fields):
    a search subset that keeps every category and head dim."""
    from harness.attention.suite import default_suite

    keep = ("name", "category", "batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "causal",
            "hidden", "softmax_scale")
    return [{k: v for k, v in s.to_dict().items() if k in keep} for s in default_suite()[::every]]


def budget(arm: str, args: argparse.Namespace) -> int:
    spec = ARMS[arm]
    return int(spec.get("evaluations") or (args.transfer_evaluations if spec.get("transfer") else args.evaluations))


def distill_into(data_dir: Path, traces: Path, source_arm: str, standin: bool) -> int:
    """Lessons distilled from `source_arm`'s trace into a new data dir's database (as
    `socratic lessons distill --from TRACE` does); returns how many."""
    from app.domain.lessons import distill_files
    from app.settings import Settings
    from app.store.database import open_database

    trace = traces / f"{'cpu-standin-' if standin else ''}{source_arm}.jsonl.xz"
    if not trace.is_file():
        raise SystemExit(f"{trace} is missing: run the {source_arm} arm first")
    data_dir.mkdir(parents=True, exist_ok=True)
    database = open_database(Settings(data_dir=data_dir))
    try:
        with database.session() as db:
            done = distill_files(db, [trace])
            db.commit()
    finally:
        database.dispose()
    print(f"[lessons] {done.result.created} lessons from {trace.name} ({done.observations} observations)", flush=True)
    return done.result.created


def drive(http: httpx.Client, sid: int, auto_ask: bool, args: argparse.Namespace, t0: float, evaluations: int) -> str:
    """Poll the session; resume each pause without a word (the bank answers its own pauses in the
    auto-ask arms; a pause it leaves unanswered is resumed after a grace period)."""
    paused_since: float | None = None
    idle_pauses, last_evals = 0, -1
    while True:
        s = http.get(f"/api/sessions/{sid}").json()
        if s["evaluations"] >= evaluations:
            return f"budget of {evaluations} evaluations"
        if s["status"] in FINAL_STATES:
            return f"session {s['status']}: {s.get('detail', '')}"
        if time.monotonic() - t0 > args.deadline_s:
            return f"deadline of {args.deadline_s:g} s"
        if s["status"] == "paused":
            paused_since = paused_since or time.monotonic()
            grace = args.bank_grace_s if auto_ask else 0.0
            if time.monotonic() - paused_since >= grace:
                if s["evaluations"] == last_evals:
                    idle_pauses += 1
                    if idle_pauses >= IDLE_PAUSES:
                        return "the agent has nothing left to measure"
                else:
                    idle_pauses, last_evals = 0, s["evaluations"]
                http.post(f"/api/sessions/{sid}/resume", json={"author": "proof"})
                paused_since = None
        else:
            paused_since = None
        time.sleep(args.poll_s)


def export_trace(sid: int, data_dir: Path, traces: Path, arm: str, standin: bool) -> Path:
    """`python -m app trace export SID -o TRACE.jsonl.xz` (its own code, in this process: the
    server has stopped), xz-compressed like examples/campaigns/."""
    from app.domain.audit.trace_io import export_session, trace_bytes
    from app.settings import Settings
    from app.store.database import open_database

    traces.mkdir(parents=True, exist_ok=True)
    target = traces / f"{'cpu-standin-' if standin else ''}{arm}.jsonl.xz"
    database = open_database(Settings(data_dir=data_dir))
    try:
        with database.session() as db:
            text = export_session(db, sid)
    finally:
        database.dispose()
    target.write_bytes(trace_bytes(text, target.name))
    return target


def final_table(results: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every arm's leader evaluated again, one after the other, with the peers timed side by side.
    Each row is printed and written to summary.json as soon as it is measured: a device call cut
    at its limit still brings back the kernels judged before the cut."""
    from harness.attention.suite import default_suite
    from harness.suite import select

    rows: list[dict[str, Any]] = []
    for r in results:
        expr = r.get("filter") or args.filter
        scenarios = select(default_suite(), "all", None if expr == ALL else expr)
        source = Path(r["leader_source"])
        if not source.read_text().strip():
            rows.append({**r, "card": "-", "x_baseline": None, "x_fa3": None, "x_cudnn": None, "x_fa2": None})
            continue
        print(f"[final] {r['arm']}: {len(scenarios)} scenarios, the peers timed beside it", flush=True)
        t0 = time.monotonic()
        report = evaluate_leader(source, scenarios, args.cpu_standin, final_progress(r["arm"], t0))
        summary = report.summary("all")
        rows.append({**r, "card": report.gpu, "passed": f"{summary.passed}/{summary.scenarios}",
                     "x_baseline": summary.vs_baseline, "x_fa3": summary.vs_peers.get("fa3"),
                     "x_cudnn": summary.vs_peers.get("cudnn"), "x_fa2": summary.vs_peers.get("flash"),
                     "fa3_by_category": fa3_by_category(report.scenarios), "final_s": time.monotonic() - t0})
        print(f"[final] {r['arm']}: {rows[-1]['passed']} passed, x FA3 {fmt(rows[-1]['x_fa3'])}, "
              f"x baseline {fmt(rows[-1]['x_baseline'], '.2f')} ({rows[-1]['final_s']:.0f} s, {report.gpu})",
              flush=True)
        write_summary(args, rows, table=None)
    return rows


def final_progress(arm: str, t0: float, every: int = 20, quiet_s: float = 15.0) -> ProgressFn:
    """A line every `every` scenarios (and at the last), and the evaluation's own messages (the
    worker ready, the baseline cache filling on a fresh machine) at most one per `quiet_s`: where
    a long final is, in its log."""
    last = [-quiet_s]

    def show(p: Progress) -> None:
        now = time.monotonic() - t0
        if p.result is not None and (p.done % every == 0 or p.done == p.total):
            print(f"[final] {arm}: {p.done}/{p.total} scenarios ({p.scenario}), {now:.0f} s", flush=True)
        elif p.result is None and p.message and now - last[0] >= quiet_s:
            last[0] = now
            print(f"[final] {arm}: {p.message}, {now:.0f} s", flush=True)
    return show


def write_summary(args: argparse.Namespace, rows: list[dict[str, Any]], table: str | None) -> None:
    """summary.json: the rows so far; `table` is None until the final table is printed."""
    (args.out / "summary.json").write_text(json.dumps(
        {"standin": args.cpu_standin, "complete": table is not None, "rows": rows, "table": table},
        indent=1, default=str))


def fa3_by_category(scenarios: list[Any]) -> dict[str, float | None]:
    """x FA3 per category: where a leader that misses the all-182 target loses its time."""
    from harness.report import summarize

    categories = sorted({s.category for s in scenarios})
    return {c: summarize([s for s in scenarios if s.category == c]).vs_peers.get("fa3") for c in categories}


def reference(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    """A kernel that is no arm's leader (`--also LABEL=PATH`), as a row of the final table."""
    label, _, path = spec.partition("=")
    if not path or not Path(path).is_file():
        raise SystemExit(f"--also {spec!r}: give LABEL=KERNEL.cu with an existing file")
    return {"arm": label, "evaluations": "-", "leader": None, "leaders": [], "stopped_because": "reference",
            "diagnosis": "", "leader_source": str(Path(path).resolve()), "filter": args.filter}


def evaluate_leader(source: Path, scenarios: list[Any], standin: bool,
                    progress: ProgressFn | None = None) -> Any:
    if standin:
        import threading

        from app.services.evaluation import Implementation
        from harness.settings import EvalSettings
        from kernels.attention.family import default_knobs, render
        from tests.family_model import fake_evaluate

        with tempfile.TemporaryDirectory() as tmp:  # the baseline has no knobs: speed 1
            base = Path(tmp) / "baseline.cu"
            base.write_text((ROOT / "kernels" / "attention" / "baseline.cu").read_text())
            assert default_knobs() and callable(render)  # the family is importable here
            return fake_evaluate(Implementation("cuda", str(source), source.name),
                                 Implementation("cuda", str(base), "baseline"), scenarios, EvalSettings(),
                                 progress, threading.Event(), hopper=True, peers=True)
    from harness.evaluate import evaluate_source
    from harness.settings import EvalSettings

    return evaluate_source(source, scenarios, settings=EvalSettings(peers=("cudnn", "flash", "fa3")),
                           progress=progress)


def fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else f"{v:{spec}}"


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = []
    if args.cpu_standin:
        lines.append(STANDIN_LABEL)
    # Each arm's own scenarios (its result records them): a --final call is given no --filter.
    lines.append(f"seed {args.seed}")
    lines.append("| arm | scenarios | card | evaluations | leader # (evaluations to reach it) | x baseline | x FA3 | "
                 "x cuDNN | x FA2 | stopped because |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        where = r.get("filter", "-") + (f" (searched on {r['searched_on']})" if r.get("searched_on") else "")
        lines.append(f"| {r['arm']} | {where} | {r.get('card', '-')} | {r['evaluations']} | "
                     f"{r['leader'] or '-'} | "
                     f"{fmt(r.get('x_baseline'), '.2f')} | {fmt(r.get('x_fa3'))} | {fmt(r.get('x_cudnn'))} | "
                     f"{fmt(r.get('x_fa2'))} | {r['stopped_because']} |")
    for r in rows:
        if r.get("fa3_by_category"):
            lines.append(f"{r['arm']}: x FA3 by category: " + ", ".join(
                f"{c} {fmt(v)}" for c, v in r["fa3_by_category"].items()))
    for r in rows:
        lines.append(f"{r['arm']}: leaders {r['leaders']}; lesson moves {r.get('lesson_moves', 0)} of "
                     f"{r.get('lessons_given', 0)} lessons given; last diagnosis: {r['diagnosis']}")
    lines.extend(lesson_lines(rows))
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def reached(speedups: list[Any], target: float) -> int | None:
    """The evaluation (1-based) whose candidate first reached `target` x baseline, or None."""
    for i, x in enumerate(speedups, 1):
        if isinstance(x, (int, float)) and x >= target:
            return i
    return None


def lesson_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Issue 46's two measures. Memory: evaluations the remembered arm took to reach the first
    arm's final leader (within 2%), against the first arm's own. Transfer: evaluations to 0.8x FA3
    on GQA with and without the prefill lessons (FA3 in x baseline from each arm's final
    side-by-side evaluation: x_baseline / x_fa3)."""
    by = {r["arm"]: r for r in rows}
    out = []
    first, second = by.get("autonomous"), by.get("remembered")
    if first and second and first.get("leader_speedup"):
        target = 0.98 * float(first["leader_speedup"])
        out.append(f"memory: the first arm's final leader {first['leader_speedup']:.2f}x baseline at evaluation "
                   f"{reached(first['speedups'], target)}; the remembered arm reached it at evaluation "
                   f"{reached(second['speedups'], target)} (within 2%; None: never, in "
                   f"{second['evaluations']} evaluations)")
    for arm in ("gqa-plain", "gqa-lessons"):
        r = by.get(arm)
        if r and r.get("x_fa3") and r.get("x_baseline"):
            fa3 = float(r["x_baseline"]) / float(r["x_fa3"])  # FA3 in x baseline, measured side by side
            out.append(f"transfer: {arm} reached 0.8x FA3 ({0.8 * fa3:.2f}x baseline) at evaluation "
                       f"{reached(r['speedups'], 0.8 * fa3)}; final {r['x_fa3']:.3f}x FA3 in {r['evaluations']}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("/tmp/agent-v2"), help="results, data dirs, summary.json")
    p.add_argument("--arms", default="autonomous,bank,greedy", help=f"comma-separated: {', '.join(ARMS)}")
    p.add_argument("--filter", default="category=prefill", help="the sessions' scenarios (a harness --filter)")
    p.add_argument("--evaluations", type=int, default=40)
    p.add_argument("--transfer-evaluations", type=int, default=20, help="the GQA arms' budget (issue 46's transfer)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--plateau-window", type=int, default=4)
    p.add_argument("--deadline-s", type=float, default=540.0, help="stop an arm after this long")
    p.add_argument("--bank-grace-s", type=float, default=5.0,
                   help="auto-ask arms: a pause the bank leaves unanswered this long is resumed without a word")
    p.add_argument("--poll-s", type=float, default=0.5)
    p.add_argument("--traces", default=str(ROOT / "examples" / "agent-v2"))
    p.add_argument("--resume", action="store_true",
                   help="go on with an arm a deadline stopped (its data dir under --out is kept between calls)")
    p.add_argument("--gpus", help="run the arms at once, one per GPU of this host (CUDA_VISIBLE_DEVICES of each "
                                  "arm's server), e.g. 0,1,2; default: one arm after the other on this GPU")
    p.add_argument("--together", action="store_true",
                   help="the arms as sessions of one server at the same time, sharing this GPU through its "
                        "device queue (one arm compiles while another is timed)")
    p.add_argument("--final", action="store_true", help="only the side-by-side evaluation of the saved leaders")
    p.add_argument("--no-final", action="store_true", help="run the arms, skip the side-by-side evaluation")
    p.add_argument("--also", action="append", default=[], metavar="LABEL=KERNEL.cu",
                   help="a kernel evaluated in the final table beside the arms' leaders, on --filter's scenarios "
                        "(an earlier agent's leader, the gallery's ceiling); repeatable")
    p.add_argument("--cpu-standin", action="store_true", help="the synthetic H100 of tests/family_model.py")
    p.add_argument("--serve-standin", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_standin:
        serve_standin(args.port, args.data_dir)
        return 0
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arm(s) {unknown}; arms are {', '.join(ARMS)}")
    args.out = args.out.resolve()  # a leader's path is read back in the final, from wherever it runs
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.final:
        gpus = [g for g in (args.gpus or "").split(",") if g]
        if args.together:
            if gpus:
                p.error("--together shares this one GPU; --gpus gives each arm its own")
            run_together(arms, args, args.out)
        elif gpus:  # one arm per GPU of this host, at the same time (each server sees only its GPU)
            if len(gpus) < len(arms):
                p.error(f"--gpus names {len(gpus)} GPU(s) for {len(arms)} arms")
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(arms)) as pool:
                started = [pool.submit(run_arm, arm, args, args.out, gpu)
                           for arm, gpu in zip(arms, gpus[:len(arms)], strict=True)]
                for done in started:
                    done.result()
        else:
            for arm in arms:
                run_arm(arm, args, args.out)
    if args.no_final:
        return 0
    results = [json.loads(f.read_text()) for f in sorted(args.out.glob("*/result.json"))
               if f.parent.name in ARMS]
    results.sort(key=lambda r: list(ARMS).index(r["arm"]))
    results += [reference(spec, args) for spec in args.also]
    rows = final_table(results, args)
    write_summary(args, rows, print_table(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
