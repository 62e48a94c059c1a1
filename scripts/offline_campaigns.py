"""Two campaigns of the offline search agent on one GPU and the same evaluation budget: in one
the question bank answers every pause (auto-ask at once), in the other every pause is resumed
without a message. Headless: the sessions are created and run by the server's own domain code
and runner (no web server, no browser); both share the GPU through the device queue, and each
compiles its next candidate while the other holds the GPU.

Inside the sessions, peer times come from the server's peer cache after their first measurement
(harness/peer_cache.py). At the end both leaders are therefore evaluated once more, one after
the other in this process, with cuDNN and flash timed side by side and no cache: the numbers
printed against cuDNN and flash are those. Prints both leaders' geomean speedups over the
baseline and against cuDNN, what an evaluation cost, writes summary.json, and leaves both
sessions' traces in one SQLite file (campaigns.db).

    PYTHONPATH=. python3 scripts/offline_campaigns.py --out DIR [--data-dir /tmp/x] [--evaluations 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from app.domain.schemas import ScenarioIn, SessionCreate, ThresholdsIn
from app.domain.sessions import (
    Conflict,
    candidates_of,
    get_session,
    interventions_of,
    resume,
    start,
    stop,
    triggers_of,
)
from app.engine.engine import Engine
from app.engine.new_session import create_session
from app.engine.runner.manager import RunnerManager
from app.services.context import ServerContext
from app.settings import Settings
from app.store.events import LiveNote
from app.store.models import DONE, FAILED, INTERRUPTED, PAUSED, STOPPED, Candidate, Evaluation
from harness.report import EvaluationReport

FINAL = (DONE, STOPPED, FAILED)
# Ten visible scenarios of the default suite, one or two of each kind, small enough that the
# naive baseline is timed in a fraction of a second.
SCENARIOS = (
    "prefill-d64-s2048-b8-h32-full",
    "prefill-d128-s4096-b4-h16-full",
    "prefill-d256-s2048-b8-h8-full",
    "gqa-llama3-70b-tp8-s8192-b1-causal",
    "gqa-gemma2-9b-tp4-s4096-b2-causal",
    "chunk-llama3-70b-tp8-q2048-k32768",
    "decode-llama3-8b-tp1-q4-b128-k1024",
    "decode-llama3-70b-tp8-q1-b64-k8192",
    "ragged-d128-q3001-k3001-full",
    "ragged-d256-q2049-k4097-causal",
)
MODES = ("bank", "silent")


def scenario_specs(names: tuple[str, ...]) -> list[ScenarioIn]:
    from harness.attention.suite import default_suite

    suite = {s.name: s for s in default_suite()}
    out = []
    for name in names:
        s = suite[name]
        out.append(ScenarioIn(name=s.name, category=s.category, batch=s.batch, seqlen_q=s.seqlen_q,
                              seqlen_k=s.seqlen_k, heads_q=s.heads_q, heads_kv=s.heads_kv,
                              head_dim=s.head_dim, causal=s.causal, hidden=s.hidden))
    return out


async def stop_at_budget(ctx: ServerContext, runners: RunnerManager, session_id: int, evaluations: int) -> None:
    """Stop the session as soon as its evaluation budget is spent (before another one starts)."""
    queue = ctx.hub.subscribe(session_id)
    while True:
        item = await queue.get()
        if isinstance(item, LiveNote) or item.kind != "verdict":
            continue
        with ctx.unit() as u:
            session = get_session(u.db, session_id)
            if session.status in FINAL or session.evaluations < evaluations:
                continue
            stop(u, session_id, "campaign", f"the budget of {evaluations} evaluations is spent")
        runners.changed(session_id)
        return


def leader_numbers(ctx: ServerContext, session_id: int) -> dict[str, Any]:
    with ctx.database.session() as db:
        session = get_session(db, session_id)
        cands = list(candidates_of(db, session_id))
        leader = next((c for c in cands if c.id == session.leader_id), None)
        report = None
        if leader is not None:
            row = db.exec(select(Evaluation).where(Evaluation.candidate_id == leader.id, Evaluation.purpose == "suite")
                          .order_by(col(Evaluation.id).desc())).first()
            report = EvaluationReport.from_dict(row.report) if row is not None else None
        summary = report.summary("all") if report is not None else None
        return {
            "session_id": session_id, "title": session.title, "status": session.status,
            "evaluations": session.evaluations,
            "leader": {"number": leader.number, "title": leader.title, "speedup_vs_baseline": leader.speedup,
                       "vs_cudnn": summary.vs_peers.get("cudnn") if summary else None,
                       "passed": summary.passed if summary else 0,
                       "scenarios": summary.scenarios if summary else 0} if leader else None,
            "candidates": [{"number": c.number, "title": c.title, "verdict": c.verdict, "speedup": c.speedup,
                            "reason": c.verdict_reason[:160]} for c in cands],
            "triggers": [{"kind": t.kind, "summary": t.summary, "resolution": t.resolution}
                         for t in triggers_of(db, session_id)],
            "interventions": [{"author": i.author, "kind": i.kind, "text": i.text, "status": i.status,
                               "credited_gain": i.credited_gain} for i in interventions_of(db, session_id)],
        }


def evaluation_costs(ctx: ServerContext, session_id: int) -> dict[str, Any]:
    """Seconds per suite evaluation, and the worker's setup share (spare process or not)."""
    with ctx.database.session() as db:
        rows = db.exec(select(Evaluation).join(Candidate, col(Candidate.id) == col(Evaluation.candidate_id))
                       .where(Candidate.session_id == session_id, Evaluation.purpose == "suite")).all()
        seconds = [r.seconds for r in rows]
        info = [(r.report.get("settings") or {}).get("device_info") or {} for r in rows]
        cached = sum(1 for r in rows for s in r.report.get("scenarios", []) for p in (s.get("peers") or {}).values()
                     if p.get("cached_at"))
    setups = [float(i["setup_s"]) for i in info if "setup_s" in i]
    return {"suite_evaluations": len(rows),
            "mean_s": round(sum(seconds) / len(seconds), 2) if seconds else None,
            "mean_setup_s": round(sum(setups) / len(setups), 2) if setups else None,
            "spare_starts": sum(1 for i in info if i.get("spare")), "cached_peer_results": cached}


def side_by_side(ctx: ServerContext, ids: dict[str, int]) -> dict[str, Any]:
    """Both leaders evaluated again on the campaign's scenarios, cuDNN and flash timed in the
    same worker processes (no peer cache), one right after the other."""
    from app.services.evaluation import gpu_timing
    from harness.attention.suite import default_suite
    from harness.evaluate import evaluate_source
    from harness.settings import EvalSettings

    suite = {s.name: s for s in default_suite()}
    scenarios = [suite[n] for n in SCENARIOS]
    settings = EvalSettings(peers=("cudnn", "flash"), timing=gpu_timing(ctx.settings.timing_budget_ms))
    out: dict[str, Any] = {}
    for mode, sid in ids.items():
        with ctx.database.session() as db:
            session = get_session(db, sid)
            leader = db.get(Candidate, session.leader_id) if session.leader_id else None
        if leader is None:
            out[mode] = None
            continue
        path = ctx.settings.sources_dir / f"session-{sid}" / f"candidate-{leader.number}.cu"
        report = evaluate_source(path, scenarios, settings=settings)
        s = report.summary("all")
        out[mode] = {"leader": leader.number, "title": leader.title, "passed": s.passed, "scenarios": s.scenarios,
                     "vs_baseline": s.vs_baseline, "vs_cudnn": s.vs_peers.get("cudnn"),
                     "vs_flash": s.vs_peers.get("flash"), "tflops": s.tflops, "seconds": round(report.seconds, 1),
                     "verdict": str(report.verdict())}
    return out


async def campaign(args: argparse.Namespace) -> dict[str, Any]:
    from question_bank.auto_ask import AutoAskPolicy, set_policy

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    db_path = out / "campaigns.db"
    data_dir = Path(args.data_dir).resolve() if args.data_dir else out / "data"
    settings = Settings(data_dir=data_dir, db_url=f"sqlite:///{db_path}", timing_budget_ms=args.timing_budget_ms,
                        peers=("cudnn",), trials=2, bank_semantic_search=False)
    engine = Engine(settings)  # the server's own start: database, bank, services, runners, recovery
    await engine.start()
    ctx, runners, database = engine.ctx, engine.runners, engine.ctx.database

    ids: dict[str, int] = {}
    watchers = []
    for mode in MODES:
        how = "bank questions answer each pause" if mode == "bank" else "pauses resumed without a message"
        spec = SessionCreate(
            title=f"offline agent, {how}",
            agent="offline", agent_config={"seed": args.seed, "strategy": "greedy"}, candidate_kind="cuda",
            scenarios=scenario_specs(SCENARIOS),
            thresholds=ThresholdsIn(plateau_window=args.plateau_window, suspicious_jump=args.suspicious_jump),
        )
        with ctx.unit() as u:
            session = create_session(u, spec, settings)
            sid = session.id or 0
            start(u, sid)
        if mode == "bank":
            with database.session() as db:
                set_policy(db, str(sid), AutoAskPolicy("at_once", max_in_a_row=20))
        ids[mode] = sid
        watchers.append(asyncio.create_task(stop_at_budget(ctx, runners, sid, args.evaluations)))
        runners.ensure_running(sid)

    t0 = time.monotonic()
    paused_since: dict[int, float] = {}
    while True:
        statuses = {}
        for mode, sid in ids.items():
            with ctx.unit() as u:
                session = get_session(u.db, sid)
                status = session.status
                if status not in FINAL and session.evaluations >= args.evaluations:
                    stop(u, sid, "campaign", f"the budget of {args.evaluations} evaluations is spent")
                    status = STOPPED
                elif status == PAUSED:
                    since = paused_since.setdefault(sid, time.monotonic())
                    # The silent campaign resumes at once; the bank's auto-ask resumes its own
                    # session, and anything it does not answer is resumed after a short wait.
                    if mode == "silent" or time.monotonic() - since > args.bank_grace_s:
                        try:
                            resume(u, sid, "campaign")
                            status = "running"
                        except Conflict as exc:
                            print(f"session {sid}: cannot resume: {exc}", file=sys.stderr)
                if status != PAUSED:
                    paused_since.pop(sid, None)
            runners.changed(sid)
            statuses[mode] = status
        elapsed = time.monotonic() - t0
        if all(s in FINAL or s == INTERRUPTED for s in statuses.values()):
            break
        if elapsed > args.deadline_s:
            print(f"deadline of {args.deadline_s:g} s reached: stopping both sessions", file=sys.stderr)
            for sid in ids.values():
                with ctx.unit() as u:
                    if get_session(u.db, sid).status not in FINAL:
                        stop(u, sid, "campaign", "the campaign's time ran out")
                runners.changed(sid)
            break
        await asyncio.sleep(0.5)
    for sid in ids.values():
        with contextlib.suppress(TimeoutError):
            await runners.wait_idle(sid, timeout=60)
    for w in watchers:
        w.cancel()
    await runners.shutdown()
    result: dict[str, Any] = {mode: leader_numbers(ctx, sid) for mode, sid in ids.items()}
    for mode, sid in ids.items():
        result[mode]["costs"] = evaluation_costs(ctx, sid)
    campaign_s = time.monotonic() - t0
    if not args.no_final:
        result["side_by_side"] = await asyncio.to_thread(side_by_side, ctx, ids)
    result["settings"] = {"evaluations": args.evaluations, "seed": args.seed, "plateau_window": args.plateau_window,
                          "suspicious_jump": args.suspicious_jump, "timing_budget_ms": args.timing_budget_ms,
                          "scenarios": list(SCENARIOS), "campaign_s": round(campaign_s, 1),
                          "wall_s": round(time.monotonic() - t0, 1)}
    with database.engine.connect() as conn:  # fold the WAL into the file before it is copied
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    await engine.stop()
    (out / "summary.json").write_text(json.dumps(result, indent=1))
    return result


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="campaigns.db and summary.json go here")
    ap.add_argument("--data-dir", help="candidate sources and prefetched builds (default: OUT/data)")
    ap.add_argument("--evaluations", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plateau-window", type=int, default=3)
    ap.add_argument("--suspicious-jump", type=float, default=50.0,
                    help="family kernels are legitimately many times the naive baseline")
    ap.add_argument("--timing-budget-ms", type=float, default=5.0)
    ap.add_argument("--deadline-s", type=float, default=240.0)
    ap.add_argument("--bank-grace-s", type=float, default=5.0)
    ap.add_argument("--no-final", action="store_true",
                    help="skip the final side-by-side evaluation of both leaders with fresh peers")
    args = ap.parse_args()
    result = asyncio.run(campaign(args))
    for mode in MODES:
        r = result[mode]
        lead = r["leader"] or {}
        print(f"{mode:7s} session {r['session_id']}: {r['evaluations']} evaluations, {r['status']}; leader "
              f"#{lead.get('number')} {lead.get('title')!r}: {_x(lead.get('speedup_vs_baseline'))} vs baseline, "
              f"{_x(lead.get('vs_cudnn'))} vs cuDNN ({lead.get('passed')}/{lead.get('scenarios')} passed)")
        for c in r["candidates"]:
            print(f"   #{c['number']:>2} {c['verdict'] or '-':8s} {_x(c['speedup']):>8s}  {c['title']}")
        for i in r["interventions"]:
            print(f"   asked ({i['author']}): {i['text'][:110]}")
        print(f"   pauses: {', '.join(t['kind'] for t in r['triggers'])}")
        c = r["costs"]
        print(f"   cost: {c['suite_evaluations']} suite evaluations, {c['mean_s']} s each on average "
              f"(worker setup {c['mean_setup_s']} s; {c['spare_starts']} on a spare process; "
              f"{c['cached_peer_results']} peer results from the cache)")
    final = result.get("side_by_side") or {}
    if final:
        print("\nleaders evaluated again, side by side with fresh cuDNN and flash timings:")
        print(f"{'campaign':8s} {'leader':>6s} {'passed':>7s} {'x baseline':>10s} {'x cuDNN':>8s} {'x flash':>8s}")
        for mode in MODES:
            f = final.get(mode)
            if f:
                print(f"{mode:8s} {'#' + str(f['leader']):>6s} {f['passed']:>3d}/{f['scenarios']:<3d} "
                      f"{_x(f['vs_baseline']):>10s} {_x(f['vs_cudnn']):>8s} {_x(f['vs_flash']):>8s}  {f['title']}")
    s = result["settings"]
    print(f"campaigns {s['campaign_s']} s, whole run {s['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
