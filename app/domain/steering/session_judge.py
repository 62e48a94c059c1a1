"""The strict judge (DESIGN): a candidate that fails any scenario is rejected; one that is
correct but not faster than the leader is kept as a backup; one that is correct and faster
becomes a contender, and is accepted as the new leader only after it is re-timed
interleaved with the previous leader (verifier rule 5) and still wins. Speedups are harness
geomeans over ALL scenarios of the session, hidden ones included."""

from __future__ import annotations

from dataclasses import dataclass

from app.store.models import BACKUP, LEADER, REJECTED
from harness.report import EvaluationReport
from harness.stats import geomean

IMPOSSIBLE = "impossible:"


@dataclass(frozen=True)
class JudgeSettings:
    min_gain: float = 0.01  # a new leader must beat the old one by this fraction
    retime_min_gain: float = 0.0  # and still beat it, timed interleaved, by this fraction
    # In a re-time the previous leader may run at most this much slower (geomean) than in its
    # own evaluation on the same GPU: run to run the geomean moves by well under 1%.
    leader_slowdown: float = 0.10


@dataclass(frozen=True)
class Judgement:
    verdict: str  # leader | backup | rejected; "contender" until the re-time confirms it
    reason: str
    speedup: float | None
    needs_retime: bool = False


CONTENDER = "contender"


def sanity_flags(report: EvaluationReport) -> list[str]:
    """The report's 'impossible' flags, with the scenario each one is about."""
    flags = [f"{r.scenario}: {f}" for r in report.scenarios for f in r.flags if f.startswith(IMPOSSIBLE)]
    flags.extend(f for f in report.flags if f.startswith(IMPOSSIBLE))
    return flags


def _first_flag(report: EvaluationReport) -> str:
    """The first sanity flag, naming the scenario only when it is visible: verdict reasons
    reach the agent, which must never learn hidden scenarios."""
    for r in sorted(report.scenarios, key=lambda r: r.hidden):
        for f in r.flags:
            if f.startswith(IMPOSSIBLE):
                return f"a hidden scenario: {f}" if r.hidden else f"{r.scenario}: {f}"
    return next((f for f in report.flags if f.startswith(IMPOSSIBLE)), "")


def _untimed(report: EvaluationReport, who: str, *, none_timed: bool = False) -> str | None:
    """Why a ratio over this report would be partial: the scenarios where `who` (the baseline,
    or the previous leader in a re-time) was not timed while others were (with `none_timed`,
    also when it was timed on none). The geomean would cover only the scenarios left, chosen by
    whatever stopped it, so no verdict rests on it. Hidden scenarios are never named (the
    reason reaches the agent)."""
    untimed = sorted((r for r in report.scenarios if r.speedup_vs_baseline is None), key=lambda r: r.hidden)
    if not untimed or (len(untimed) == len(report.scenarios) and not none_timed):
        return None
    where = "a hidden scenario" if untimed[0].hidden else untimed[0].scenario
    why = next((f for f in untimed[0].flags if f.startswith("baseline not timed")), "not timed")
    timed = len(report.scenarios) - len(untimed)
    return (f"{who} was not timed on {len(untimed)} of {len(report.scenarios)} scenarios "
            f"(first {where}: {why}; timed on {timed})")


def judge(report: EvaluationReport, leader_speedup: float | None, has_leader_candidate: bool,
          settings: JudgeSettings = JudgeSettings()) -> Judgement:
    """First verdict on a suite evaluation. `leader_speedup` is the current leader's geomean
    vs baseline on all scenarios (None: no leader yet, the baseline itself leads at 1.0)."""
    total = report.summary("all")
    if not report.compile.ok:
        return Judgement(REJECTED, "did not compile or failed static checks", None)
    if not report.all_passed:
        failed = [r for r in report.scenarios if not r.passed]
        hidden = sum(r.hidden for r in failed)
        visible = [r for r in failed if not r.hidden]
        parts = []
        if visible:
            first = visible[0]
            parts.append(f"{len(visible)} visible scenario(s) failed, first {first.scenario}: "
                         f"{first.status} ({first.reason})")
        if hidden:
            parts.append(f"{hidden} hidden scenario(s) failed")
        return Judgement(REJECTED, "; ".join(parts), total.vs_baseline)
    if sanity_flags(report):
        return Judgement(REJECTED, f"blocked by a sanity check until re-verified: {_first_flag(report)}",
                         total.vs_baseline)
    speedup = total.vs_baseline
    if speedup is None:
        return Judgement(BACKUP, "correct, but no speedup could be measured", None)
    partial = _untimed(report, "the baseline")
    if partial:
        return Judgement(BACKUP, f"correct, but the speedup is incomplete: {partial}", speedup)
    reference = leader_speedup if leader_speedup is not None else 1.0
    target = reference * (1.0 + settings.min_gain)
    who = "the leader" if leader_speedup is not None else "the baseline"
    if speedup <= target:
        return Judgement(BACKUP, f"correct but not faster: {speedup:.3f}x vs {who}'s {reference:.3f}x "
                                 f"(needs > {target:.3f}x)", speedup)
    if not has_leader_candidate:
        # Timed interleaved with the baseline, which is the previous leader: accepted as is.
        return Judgement(LEADER, f"correct and faster: {speedup:.3f}x over the baseline", speedup)
    return Judgement(CONTENDER, f"{speedup:.3f}x vs the leader's {reference:.3f}x; re-timing against it",
                     speedup, needs_retime=True)


def leader_slowdown(retime: EvaluationReport, leader_own: EvaluationReport) -> float | None:
    """How much slower the previous leader ran in the contender's process than in its own
    evaluation: the geomean over their common scenarios of its re-time time over its own time.
    None when they did not both run on one kind of GPU (on the CPU backend a stand-in's time
    is its sleep plus the machine's load) or share no timed scenario."""
    if retime.gpu != leader_own.gpu or {retime.settings.get("device"), leader_own.settings.get("device")} != {"cuda"}:
        return None
    own = {r.scenario: r.time_ms for r in leader_own.scenarios if r.time_ms}
    return geomean(r.baseline_ms / own[r.scenario] for r in retime.scenarios
                   if r.baseline_ms and own.get(r.scenario))


def confirm(retime: EvaluationReport, first: Judgement, settings: JudgeSettings = JudgeSettings(),
            leader_own: EvaluationReport | None = None) -> Judgement:
    """Final verdict on a contender from its re-time, where the previous leader was the
    baseline timed interleaved with it (speedup_vs_baseline = candidate over old leader).
    `leader_own`, the previous leader's own suite evaluation, shows whether the leader ran as
    fast beside the contender as it did alone: a kernel that slows the other library in its
    process (it shares the address space) must not win by it."""
    if not retime.all_passed:
        failed = sorted((r for r in retime.scenarios if not r.passed), key=lambda r: r.hidden)[0]
        where = "a hidden scenario" if failed.hidden else failed.scenario
        return Judgement(REJECTED, f"failed when re-timed: {where}: {failed.status} ({failed.reason})",
                         first.speedup)
    if sanity_flags(retime):
        return Judgement(REJECTED, f"blocked by a sanity check when re-timed: {_first_flag(retime)}",
                         first.speedup)
    # A re-time leads only over every scenario: whatever stopped the leader in the contender's
    # process must not choose the shapes its ratio is over (docs/server.md, "The strict judge").
    partial = _untimed(retime, "the previous leader", none_timed=True)
    if partial:
        return Judgement(BACKUP, f"the re-time is incomplete: {partial}; the leader stays", first.speedup)
    slow = leader_slowdown(retime, leader_own) if leader_own is not None else None
    if slow is not None and slow > 1.0 + settings.leader_slowdown:
        return Judgement(BACKUP, f"the previous leader ran {slow:.2f}x slower in the re-time than in its own "
                                 f"evaluation (at most {1.0 + settings.leader_slowdown:.2f}x): the re-time does "
                                 "not compare it as it runs; the leader stays", first.speedup)
    ratio = retime.summary("all").vs_baseline
    if ratio is None or ratio <= 1.0 + settings.retime_min_gain:
        shown = "unmeasured" if ratio is None else f"{ratio:.3f}x"
        return Judgement(BACKUP, f"faster in its own run, but {shown} against the leader when re-timed "
                                 "interleaved with it", first.speedup)
    return Judgement(LEADER, f"{first.speedup:.3f}x over the baseline; {ratio:.3f}x over the previous "
                             f"leader on all {len(retime.scenarios)} scenarios, re-timed interleaved", first.speedup)
