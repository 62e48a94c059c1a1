"""What steering is worth, measured fairly (issue 15): four arms on the same evaluation budget,
each run as a campaign of the server's own runner (headless: domain code and runners, no web
server), all arms of a seed at the same time on one GPU through the device queue.

  autonomous  one offline agent with its own plateau policy; every pause resumed without a message
  bank        one offline agent that only a question moves; the question bank answers each pause
  board       a campaign of 4 offline agents (different first layers and seeds, autonomous policy)
              with one board and the campaign judge; a campaign plateau switches stalled agents
  evolution   4 offline agents on 2 islands; each child from a parent the judge chose and one
              bank question drawn by its evidence for the situation

Every arm stops when its campaign has judged `--evaluations` candidates. The table gives each
arm's leader over >= 3 seeds: x baseline and gain over the arm's first port (the agents' common
start), x cuDNN, x flash (torch's flash SDPA backend) and x FA3 (where fa3-fwd loads) from a
final side-by-side evaluation of every leader with fresh peer timings (on a GPU), as mean,
standard deviation and range. Each arm's campaign trace is written to OUT/traces/, xz-compressed
(docs/campaigns.md, "Traces"), ready for examples/campaigns/.

On the H200, `bash scripts/gpu_checks.sh OUT campaigns` runs the seeds with five scenarios per
evaluation, one per category, then the table over OUT (`SEEDS=0` for one seed per call). By hand:

    PYTHONPATH=. python3 scripts/campaign_experiment.py --out /tmp/exp/s0 --seeds 0
    PYTHONPATH=. python3 scripts/campaign_experiment.py --out /tmp/exp/s1 --seeds 1
    PYTHONPATH=. python3 scripts/campaign_experiment.py --out /tmp/exp/s2 --seeds 2
    PYTHONPATH=. python3 scripts/campaign_experiment.py --table /tmp/exp/s0 /tmp/exp/s1 /tmp/exp/s2

Device time: the GPU evaluates one candidate at a time. On 2026-12-01 a seed of four arms at
12 evaluations took 322-401 s on one H200 (docs/campaigns.md; 405-455 s before the re-time fix,
when most re-times ran the profiler); seeds are independent, so on a machine with several GPUs
`gpu_checks.sh campaigns` runs one seed per GPU at once. Each judged candidate prints
a progress line; `--deadline-s` (480) stops a seed's arms before a ten-minute call ends, and
the table says how many evaluations each arm got.

`--cpu-standin` runs the same machinery without a GPU: every evaluation is answered by the
synthetic speed table of tests/family_model.py (real rendered kernels, made-up speeds). Its
numbers prove that the machinery works end to end and that each arm can win; they are not a
result, and the output says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from sqlmodel import select

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.domain.audit.trace_io import trace_bytes  # noqa: E402
from app.domain.campaigns.members import member_session_ids  # noqa: E402
from app.domain.campaigns.schemas import CampaignCreate, MemberIn  # noqa: E402
from app.domain.campaigns.trace import export_campaign  # noqa: E402
from app.domain.lifecycle import FINAL_STATES  # noqa: E402
from app.domain.schemas import ThresholdsIn  # noqa: E402
from app.domain.sessions import Conflict, get_session, latest_evaluation, resume, stop  # noqa: E402
from app.engine.campaigns import create_campaign  # noqa: E402
from app.engine.engine import Engine  # noqa: E402
from app.engine.runner.manager import RunnerManager  # noqa: E402
from app.engine.runner.pause import auto_ask_step  # noqa: E402
from app.services.context import ServerContext  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.store.campaign_models import Campaign  # noqa: E402
from app.store.models import INTERRUPTED, PAUSED, Candidate  # noqa: E402
from harness.report import EvaluationReport  # noqa: E402
from question_bank.auto_ask import AutoAsker  # noqa: E402
from scripts.offline_campaigns import SCENARIOS, scenario_specs  # noqa: E402

ARMS = ("autonomous", "bank", "board", "evolution")
STANDIN_LABEL = ("CPU STAND-IN: every evaluation was answered by the synthetic speed table of "
                 "tests/family_model.py, not timed on a GPU. This proves the machinery runs end to end; "
                 "it is NOT a result.")


def arm_spec(arm: str, seed: int, evaluations: int, plateau: int, agents: int,
             scenarios: tuple[str, ...] = SCENARIOS) -> CampaignCreate:
    """Each arm as a campaign, so that one budget rule, one judge and one trace format hold for all."""
    common: dict[str, Any] = {"scenarios": scenario_specs(scenarios), "budget_evaluations": evaluations,
                              "thresholds": ThresholdsIn(plateau_window=plateau, suspicious_jump=50.0),
                              "start": True}
    if arm in ("autonomous", "bank"):
        policy = "autonomous" if arm == "autonomous" else "questions"
        member = MemberIn(agent="offline", agent_config={"seed": seed, "policy": policy, "board": False},
                          title=f"solo {arm} (seed {seed})", strategy="tiling")
        # One agent: no campaign plateau switch (the window is never reached), no board.
        return CampaignCreate(title=f"solo, {arm}, seed {seed}", members=[member], plateau_window=1000, **common)
    if arm == "board":
        return CampaignCreate(title=f"campaign of {agents} with board, seed {seed}", agents=agents,
                              policy="autonomous", seed=seed * 10, plateau_window=2 * plateau * agents // 2,
                              **common)
    thresholds = ThresholdsIn(plateau_window=1000, suspicious_jump=50.0)  # each child is ordered anyway
    return CampaignCreate(title=f"evolution with question mutations, seed {seed}", mode="evolution", agents=agents,
                          policy="questions", seed=seed * 10, islands=2,
                          **{**common, "thresholds": thresholds})


async def run_seed(ctx: ServerContext, runners: RunnerManager, seed: int, args: argparse.Namespace) -> dict[str, int]:
    from question_bank.auto_ask import AutoAskPolicy, set_policy

    ids: dict[str, int] = {}
    for arm in args.arms:
        with ctx.unit() as u:
            campaign = create_campaign(u, arm_spec(arm, seed, args.evaluations, args.plateau_window, args.agents,
                                                    tuple(args.scenarios)),
                                       ctx.settings)
            ids[arm] = campaign.id or 0
        with ctx.database.session() as db:
            members = member_session_ids(db, ids[arm])
            if arm == "bank":
                for sid in members:
                    set_policy(db, str(sid), AutoAskPolicy("at_once", max_in_a_row=20))
        for sid in members:
            runners.ensure_running(sid)
    t0 = time.monotonic()
    asker = AutoAsker()
    seen: dict[str, int] = {}
    while True:
        progress(ctx, seed, ids, seen, time.monotonic() - t0)
        live = 0
        for arm, cid in ids.items():
            with ctx.database.session() as db:
                members = member_session_ids(db, cid)
            for sid in members:
                state = answer_pause(ctx, arm, sid, asker)
                if state == "final":
                    continue
                live += 1
                if state == "not answered":
                    print(f"seed {seed} bank: the bank does not answer session {sid}'s pause; resumed "
                          "without a question", file=sys.stderr)
                runners.changed(sid)
        if live == 0:
            break
        if time.monotonic() - t0 > args.deadline_s:
            print(f"seed {seed}: the deadline of {args.deadline_s:g} s stopped the arms still running", file=sys.stderr)
            for cid in ids.values():
                with ctx.database.session() as db:
                    members = member_session_ids(db, cid)
                for sid in members:
                    with ctx.unit() as u, contextlib.suppress(Conflict):
                        stop(u, sid, "experiment", "the experiment's deadline")
                    runners.changed(sid)
            break
        await asyncio.sleep(0.3)
    with ctx.database.session() as db:
        every = [sid for cid in ids.values() for sid in member_session_ids(db, cid)]
    # All runners wind down together: a stopped one cancels its evaluation, so one shared bound
    # (not one per session, one after the other) is enough.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(runners.wait_idle(sid, timeout=60) for sid in every),
                                              return_exceptions=True), 60)
    progress(ctx, seed, ids, {}, time.monotonic() - t0)
    return ids


def answer_pause(ctx: ServerContext, arm: str, sid: int, asker: AutoAsker) -> str:
    """What the experiment does with one member now: nothing while it runs ("running", or
    "final" once it ended); a paused member of the bank arm is the bank's to answer, by the
    session's auto-ask policy, at once ("bank"), as its runner would once it parks, for a pause
    may come while the runner still waits on a re-time; a pause the bank will not answer ("not
    answered"), and every pause of the other arms, is resumed without a message ("resumed")."""
    with ctx.database.session() as db:
        s = get_session(db, sid)
        status, trigger = s.status, s.open_trigger_id
    if status in FINAL_STATES:
        return "final"
    if status not in (PAUSED, INTERRUPTED):
        return "running"
    state = "resumed"
    if arm == "bank" and status == PAUSED and trigger is not None:
        wait = auto_ask_step(ctx, sid, asker)
        if wait == 0:
            return "bank"
        if wait is not None:
            return "running"  # a policy that asks later: the bank's to answer then
        state = "not answered"
    with ctx.unit() as u, contextlib.suppress(Conflict):
        resume(u, sid, "experiment")
    return state


def progress(ctx: ServerContext, seed: int, ids: dict[str, int], seen: dict[str, int], elapsed: float) -> None:
    """One line per arm whose campaign judged another candidate since the last look (a line for
    every arm when `seen` is empty), so that a run cut short still says how far each arm got."""
    with ctx.database.session() as db:
        for arm, cid in ids.items():
            c = db.get(Campaign, cid)
            if c is None or (seen and seen.get(arm) == c.evaluations):
                continue
            seen[arm] = c.evaluations
            print(f"[{elapsed:6.1f} s] seed {seed} {arm:<10} {c.evaluations:>3} evaluations, leader "
                  f"{(c.leader_speedup or 0):.3f}x baseline", flush=True)


def first_port_speedup(ctx: ServerContext, cid: int) -> float | None:
    """The arm's common start: the best-measured first candidate of its members."""
    with ctx.database.session() as db:
        firsts = [c.speedup for sid in member_session_ids(db, cid)
                  for c in db.exec(select(Candidate).where(Candidate.session_id == sid, Candidate.number == 1))
                  if c.speedup]
    return max(firsts) if firsts else None


def arm_result(ctx: ServerContext, cid: int) -> dict[str, Any]:
    with ctx.database.session() as db:
        c = db.get(Campaign, cid)
        assert c is not None
        leader = db.get(Candidate, c.leader_candidate_id) if c.leader_candidate_id else None
        stored = latest_evaluation(db, leader.id or 0, "suite") if leader else None
        summary = EvaluationReport.from_dict(stored.report).summary("all") if stored else None
        return {"campaign_id": cid, "title": c.title, "evaluations": c.evaluations, "status": c.status,
                "detail": c.detail, "leader": {"session_id": leader.session_id, "number": leader.number,
                                               "title": leader.title} if leader else None,
                "vs_baseline": c.leader_speedup, "first_port": first_port_speedup(ctx, cid),
                "vs_cudnn_in_session": summary.vs_peers.get("cudnn") if summary else None}


def side_by_side(ctx: ServerContext, results: dict[str, dict[str, Any]]) -> None:
    """Every arm's leader evaluated again, one after the other, cuDNN, flash and FlashAttention-3
    (where it loads) timed beside it in the same worker processes (no peer cache): the x cuDNN,
    x flash and x FA3 of the table."""
    from app.services.evaluation import gpu_timing
    from harness.attention.suite import default_suite
    from harness.evaluate import evaluate_source
    from harness.settings import EvalSettings

    suite = {s.name: s for s in default_suite()}
    scenarios = [suite[n] for n in SCENARIOS]
    settings = EvalSettings(peers=("cudnn", "flash", "fa3"),
                            timing=gpu_timing(ctx.settings.timing_budget_ms))
    for r in results.values():
        lead = r["leader"]
        if lead is None:
            continue
        path = ctx.settings.sources_dir / f"session-{lead['session_id']}" / f"candidate-{lead['number']}.cu"
        s = evaluate_source(path, scenarios, settings=settings).summary("all")
        r.update({"final_passed": s.passed, "final_scenarios": s.scenarios, "final_vs_baseline": s.vs_baseline,
                  "vs_cudnn": s.vs_peers.get("cudnn"), "vs_flash": s.vs_peers.get("flash"),
                  "vs_fa3": s.vs_peers.get("fa3")})


async def experiment(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out).resolve()
    (out / "traces").mkdir(parents=True, exist_ok=True)
    gpu_probe, evaluator = None, None
    if args.cpu_standin:
        from tests.family_model import SyntheticEvaluator

        evaluator = SyntheticEvaluator()  # the synthetic speed table answers every evaluation
        gpu_probe = lambda: True  # noqa: E731 - the stand-in needs no GPU, and nothing touches one
    # The sessions' peers are the server's (cuDNN, flash, FA3), their times cached after the first
    # evaluation of a shape: with cuDNN alone, every decode and chunked scenario beat the only
    # peer by over 2x and each evaluation paid the profiler's first session (docs/campaigns.md).
    settings = Settings(data_dir=out / "data", db_url=f"sqlite:///{out / 'experiment.db'}",
                        timing_budget_ms=args.timing_budget_ms, trials=2, bank_semantic_search=False)
    engine = Engine(settings, evaluator=evaluator, gpu_probe=gpu_probe)  # the server's own start
    await engine.start()
    ctx, runners, database = engine.ctx, engine.runners, engine.ctx.database
    seeds: dict[str, Any] = {}
    t0 = time.monotonic()
    for seed in args.seeds:
        ids = await run_seed(ctx, runners, seed, args)
        results = {arm: arm_result(ctx, cid) for arm, cid in ids.items()}
        if not args.cpu_standin and not args.no_final:
            await asyncio.to_thread(side_by_side, ctx, results)
        with ctx.database.session() as db:
            for arm, cid in ids.items():
                name = f"{'cpu-standin' if args.cpu_standin else 'h200'}-{arm}-seed{seed}.jsonl.xz"
                (out / "traces" / name).write_bytes(trace_bytes(export_campaign(db, cid), name))
                results[arm]["trace"] = f"traces/{name}"
        seeds[str(seed)] = results
    await runners.shutdown()
    with database.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    await engine.stop()
    summary = {"cpu_standin": args.cpu_standin, "label": STANDIN_LABEL if args.cpu_standin else "H200",
               "settings": {"evaluations": args.evaluations, "agents": args.agents, "plateau_window":
                            args.plateau_window, "timing_budget_ms": args.timing_budget_ms,
                            "scenarios": list(args.scenarios),
                            "final_scenarios": list(SCENARIOS), "wall_s": round(time.monotonic() - t0, 1)},
               "seeds": seeds}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _stats(values: list[float]) -> str:
    if not values:
        return "-"
    mean = math.exp(sum(math.log(v) for v in values) / len(values))  # geomean over seeds
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.3f}x ±{sd:.3f} [{min(values):.3f}-{max(values):.3f}]"


def table(summaries: list[dict[str, Any]]) -> str:
    """The arms over the seeds of `summaries`. Where two summaries hold one arm of one seed, the
    later one's counts (an arm run again after a change, e.g. `--arms board`)."""
    rows: dict[str, dict[str, list[float]]] = {}
    standin = any(s["cpu_standin"] for s in summaries)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for s in summaries:
        for seed, results in s["seeds"].items():
            for arm, r in results.items():
                latest[seed, arm] = r
    n = len({seed for seed, _ in latest})
    replaced = sum(len(results) for s in summaries for results in s["seeds"].values()) - len(latest)
    for (_seed, arm), r in sorted(latest.items(), key=lambda kv: (len(kv[0][0]), kv[0][0])):
        row = rows.setdefault(arm, {"base": [], "gain": [], "cudnn": [], "flash": [], "fa3": [], "evals": []})
        row["evals"].append(float(r["evaluations"]))
        base = r.get("final_vs_baseline") or r.get("vs_baseline")
        if base:
            row["base"].append(base)
        # The gain over the first port compares two numbers over the same scenarios: the
        # leader's and the first port's, both from the campaign's own evaluations.
        if r.get("vs_baseline") and r.get("first_port"):
            row["gain"].append(r["vs_baseline"] / r["first_port"])
        for key, field in (("cudnn", "vs_cudnn"), ("flash", "vs_flash"), ("fa3", "vs_fa3")):
            if r.get(field):
                row[key].append(r[field])
    lines = [f"{n} seed(s); geomean over seeds, ± standard deviation, [range]"
             + (f"; {replaced} arm run(s) replaced by a later summary's" if replaced else "")]
    seeds_of = {arm: sorted((seed for seed, a in latest if a == arm), key=lambda x: (len(x), x)) for arm in rows}
    if len({tuple(v) for v in seeds_of.values()}) > 1:
        lines.append("WARNING: the arms ran over different seeds, so the comparisons below mix them: "
                     + "; ".join(f"{arm} {','.join(seeds_of[arm])}" for arm in ARMS if arm in seeds_of))
    if standin:
        lines.insert(0, STANDIN_LABEL)
    lines.append(f"{'arm':<11} {'evaluations':<12} {'x baseline':<34} {'x first port':<34} {'x cuDNN':<34} "
                 f"{'x flash':<34} {'x FA3':<34}")
    for arm in ARMS:
        if arm in rows:
            r = rows[arm]
            evals = f"{min(r['evals']):.0f}-{max(r['evals']):.0f}"
            lines.append(f"{arm:<11} {evals:<12} {_stats(r['base']):<34} {_stats(r['gain']):<34} "
                         f"{_stats(r['cudnn']):<34} {_stats(r['flash']):<34} {_stats(r['fa3']):<34}")
    gains = {arm: math.exp(sum(math.log(v) for v in r["gain"]) / len(r["gain"])) for arm, r in rows.items()
             if r["gain"]}
    if "bank" in gains and "autonomous" in gains:
        b, a = gains["bank"] - 1, gains["autonomous"] - 1
        ratio = f"{b / a:.2f}" if a > 0 else "inf" if b > 0 else "n/a"
        lines.append(f"bank-steered vs autonomous, gain over the first port: {b:+.1%} vs {a:+.1%} "
                     f"(ratio {ratio}; target >= 1.5)")
    bases = {arm: math.exp(sum(math.log(v) for v in r["base"]) / len(r["base"])) for arm, r in rows.items()
             if r["base"]}
    solo = max((bases[a] for a in ("autonomous", "bank") if a in bases), default=None)
    if solo and "board" in bases:
        lines.append(f"campaign with board vs best solo arm: {bases['board'] / solo - 1:+.1%} (target >= +10%)")
    if solo and "evolution" in bases:
        lines.append(f"evolution vs best solo arm: {bases['evolution'] / solo - 1:+.1%}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="experiment.db, summary.json and traces/ go here")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    ap.add_argument("--evaluations", type=int, default=24, help="the evaluation budget of every arm")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), metavar="NAME",
                    help="the scenarios every campaign evaluation runs (the final side-by-side runs all of "
                         "scripts/offline_campaigns.py's ten)")
    ap.add_argument("--agents", type=int, default=4, help="agents in the board and evolution arms")
    ap.add_argument("--plateau-window", type=int, default=3)
    ap.add_argument("--timing-budget-ms", type=float, default=5.0)
    ap.add_argument("--deadline-s", type=float, default=480.0, help="per seed")
    ap.add_argument("--no-final", action="store_true", help="skip the final side-by-side evaluation with fresh peers")
    ap.add_argument("--cpu-standin", action="store_true", help="no GPU: the synthetic speed table (not a result)")
    ap.add_argument("--table", nargs="+", metavar="OUT",
                    help="print the table over earlier runs' OUT directories (or their summary.json files)")
    args = ap.parse_args()
    if args.table:
        print(table([json.loads((Path(d) if Path(d).is_file() else Path(d) / "summary.json").read_text())
                     for d in args.table]))
        return 0
    if not args.out:
        ap.error("--out is required (or --table)")
    summary = asyncio.run(experiment(args))
    for seed, results in summary["seeds"].items():
        for arm, r in results.items():
            lead = r["leader"] or {}
            print(f"seed {seed} {arm:<11} {r['evaluations']:>3} evaluations, leader {lead.get('title')!r} "
                  f"{(r.get('vs_baseline') or 0):.3f}x baseline (first port {(r.get('first_port') or 0):.3f}x); "
                  f"{r['detail']}")
    print(table([summary]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
