"""The board (posting, filters, the memory bound), the campaign judge (each verdict), the
campaign plateau's strategy switch, and the tree's ghost nodes, on a real SQLite file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlmodel import select

from app.domain.campaigns import board, hooks
from app.domain.campaigns.campaign_judge import CONTENDER, after_retime, first_verdict
from app.domain.campaigns.views import campaign_view
from app.engine.agents.base import READ_BOARD, Feedback, SteeringMessage, ToolCall, ToolResult
from app.engine.agents.offline import OfflineAgent, start_knobs
from app.engine.tools.base import ToolContext
from app.engine.tools.table import dispatch
from app.services.context import ServerContext
from app.store.campaign_models import BACKUP, DISCARDED, LEADER, BoardEntry, Campaign, CampaignMember
from app.store.models import EVALUATING, FAILED, QUEUED, REJECTED, Candidate, Event, Intervention, SteeringSession
from kernels.attention.family import LAYERS
from tests.app.domain.campaigns.support import database, judged, new_campaign, report, unit
from tests.app.engine.agents.test_offline import TASK

START = start_knobs("first-port").to_dict()


def members(db, campaign_id):  # type: ignore[no-untyped-def]
    with db.session() as s:
        return list(s.exec(select(CampaignMember).where(CampaignMember.campaign_id == campaign_id)))


def test_each_judged_candidate_posts_a_conclusion_that_agents_read_filtered_and_bounded(tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    c = new_campaign(db, settings, memory_k=3)
    a, b, _ = members(db, c.id)
    with unit(db) as u:
        first, rep = judged(u, a.session_id, START, LEADER)
        hooks.record(u, a.session_id, first.id or 0, rep, first_verdict(u.db, u.db.get(Campaign, c.id), first, None))
        swz, rep = judged(u, a.session_id, {**START, "stages": 2}, LEADER, parent=first)
        # Its session's judge re-timed it against #1, which is also the campaign leader.
        hooks.record(u, a.session_id, swz.id or 0, rep, first_verdict(u.db, u.db.get(Campaign, c.id), swz, first.id))
        bad, rep = judged(u, b.session_id, {**START, "split_kv": "1wave"}, REJECTED, passed=False)
        hooks.record(u, b.session_id, bad.id or 0, rep, first_verdict(u.db, u.db.get(Campaign, c.id), bad, None))
        skip, rep = judged(u, b.session_id, {**START, "causal_skip": True}, "backup", parent=first)
        # Faster in its own run than the campaign leader: re-timed against it, interleaved, it loses.
        look = first_verdict(u.db, u.db.get(Campaign, c.id), skip, None)
        assert look.verdict == CONTENDER and look.retime_against is not None and look.retime_against.id == swz.id
        hooks.record(u, b.session_id, skip.id or 0, rep, after_retime(look, skip, report(None)))
    with db.session() as s:
        camp = s.get(Campaign, c.id)
        assert camp is not None
        entries = board.read(s, camp)
        # The memory bound: the agents see the last 3 of 4 entries.
        assert [e.candidate_number for e in entries] == [2, 1, 2] and len(board.visible_entries(s, camp)) == 3
        stages = entries[0]
        assert stages.layer == "memory" and stages.knobs == {"stages": 2} and stages.summary == "stages=2"
        # Effects per category, visible scenarios only: 2 stages give x1.2 everywhere.
        assert stages.effects == {"decode": 1.2, "prefill": 1.2} and stages.campaign_verdict == LEADER
        assert entries[1].campaign_verdict == DISCARDED and entries[1].effects == {}
        assert [e.candidate_number for e in board.read(s, camp, outcome=DISCARDED)] == [1]
        assert [e.layer for e in board.read(s, camp, layer="masking")] == ["masking"]
        # Causal skipping helps causal prefill, not decode (whose effect is 1.0): improved only there.
        assert [e.knobs for e in board.read(s, camp, category="prefill", outcome="improved")] == \
            [{"stages": 2}, {"causal_skip": True}]
        assert [e.knobs for e in board.read(s, camp, category="decode", outcome="improved")] == [{"stages": 2}]
        camp.memory_k = None
        assert len(board.read(s, camp)) == 4  # unbounded
        # The campaign leader moved to the faster kernel; the slower correct one is a backup.
        assert camp.leader_candidate_id == swz.id and camp.evaluations == 4
        assert board.read(s, camp, outcome=BACKUP)[0].candidate_id == skip.id
        # The tree: the discarded kernel is a ghost node; lineage edges within a session.
        tree = campaign_view(s, c.id or 0).tree
        ghosts = [n["id"] for n in tree["nodes"] if n["ghost"]]
        assert ghosts == [bad.id]
        assert {(e["from"], e["to"]) for e in tree["edges"]} == {(first.id, swz.id), (first.id, skip.id)}


def posted(u, camp, session_id, knobs, verdict, parent=None, passed=True, before=None):  # type: ignore[no-untyped-def]
    """A judged candidate of the session, through the campaign judge onto the board (a
    contender loses its re-time); `before` changes the candidate first."""
    cand, rep = judged(u, session_id, knobs, verdict, parent=parent, passed=passed)
    if before is not None:
        before(cand)
    look = first_verdict(u.db, camp, cand, parent.id if parent is not None and verdict == LEADER else None)
    hooks.record(u, session_id, cand.id or 0, rep, after_retime(look, cand, report(None))
                 if look.verdict == CONTENDER else look)
    return cand


def test_agents_read_each_setting_and_visible_speedup_and_a_kernel_built_on_anothers_is_read_against_it(
        tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    c = new_campaign(db, settings)
    a, b, _ = members(db, c.id)
    with unit(db) as u:
        camp = u.db.get(Campaign, c.id)
        first = posted(u, camp, a.session_id, START, LEADER)
        posted(u, camp, a.session_id, {**START, "stages": 2}, LEADER, parent=first)
        posted(u, camp, b.session_id, START, LEADER)

        def hidden_differ(cand: Candidate) -> None:  # hidden scenarios are never shown to agents
            cand.speedup, cand.visible_speedup = 9.0, 7.0

        # b's second kernel: a's stages=2 plus causal skipping, with no parent in b's session.
        posted(u, camp, b.session_id, {**START, "stages": 2, "causal_skip": True}, LEADER,
               before=hidden_differ)
    with db.session() as s:
        camp = s.get(Campaign, c.id)
        assert camp is not None
        entries = board.read(s, camp)
        last = entries[-1]
        # Described against the nearest kernel measured before (a's #2), its effects too: causal
        # skipping alone, x1.0 on decode, not the x-over-the-first-port of stages and skip together.
        assert last.knobs == {"causal_skip": True} and last.layer == "masking"
        assert last.effects["decode"] == 1.0 and last.effects["prefill"] > 1.0
        assert entries[2].knobs == {} and entries[2].summary.startswith("#1")  # a first kernel stays one
        seen = board.for_agents(s, entries)
        assert [e["setting"] for e in seen] == [START, {**START, "stages": 2}, START,
                                                {**START, "stages": 2, "causal_skip": True}]
        assert seen[-1]["speedup"] == 7.0 and board.entry_dict(last)["speedup"] == 9.0
        assert board.in_flight(s, camp) == []  # everything submitted is on the board
    with unit(db) as u:  # a's third kernel is on the device, b's fourth waits in the queue
        third, _ = judged(u, a.session_id, {**START, "causal_skip": True}, LEADER)
        third.status, third.verdict = EVALUATING, None
        fourth, _ = judged(u, b.session_id, {**START, "stages": 1}, LEADER)
        fourth.status, fourth.verdict = QUEUED, None
    with db.session() as s:
        camp = s.get(Campaign, c.id)
        assert camp is not None
        waiting = board.in_flight(s, camp)
        assert [(w["session_id"], w["candidate"], w["setting"]) for w in waiting] == \
            [(a.session_id, 3, {**START, "causal_skip": True}), (b.session_id, 3, {**START, "stages": 1})]
        assert [w["candidate"] for w in board.in_flight(s, camp, exclude_session=a.session_id)] == [3]
    # What b's agent reads through the tool: the others' entries with settings and visible
    # speedups, and a's kernel on the device (not its own queued one).
    tools = ToolContext(b.session_id, ServerContext(settings, db), None, None, None, None)  # type: ignore[arg-type]
    read = asyncio.run(dispatch(ToolCall(READ_BOARD, {"others_only": True}, "r1"), tools))
    assert read.ok and [e["candidate"] for e in read.data["entries"]] == [1, 2]
    assert all(e["session_id"] == a.session_id and e["setting"] for e in read.data["entries"])
    assert [(w["author"], w["candidate"]) for w in read.data["in_flight"]] == [(a.name, 3)]
    assert f"Submitted, not judged yet: {a.name} #3" in read.text
    # every read says what an effect compares: the kernel built on, the baseline for a first one
    assert "over the kernel the change was built on" in read.text and "over the naive baseline" in read.text


def test_a_kernel_is_read_against_a_correct_neighbour_and_claims_no_setting_it_does_not_render(
        tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    c = new_campaign(db, settings)
    a, b, third = members(db, c.id)
    with unit(db) as u:
        camp = u.db.get(Campaign, c.id)
        first = posted(u, camp, a.session_id, START, LEADER)
        posted(u, camp, a.session_id, {**START, "stages": 2}, REJECTED, parent=first, passed=False)
        skip = posted(u, camp, a.session_id, {**START, "causal_skip": True}, "backup", parent=first)
        # b: its start, then stages=2 + causal skipping with no parent. One knob from the failed
        # stages=2 and from causal_skip: read against the correct one, never the failed one.
        posted(u, camp, b.session_id, START, LEADER)
        both = posted(u, camp, b.session_id, {**START, "stages": 2, "causal_skip": True}, "backup")

        def hand_edit(cand: Candidate) -> None:  # it keeps the header of the setting it came from
            cand.source = cand.source.replace("{", "{ ", 1)

        edited = posted(u, camp, b.session_id, {**START, "stages": 1}, "backup", before=hand_edit)
        # The third member's session failed with a kernel still queued: not "in flight" forever.
        stuck, _ = judged(u, third.session_id, {**START, "split_kv": "1wave"}, LEADER)
        stuck.status, stuck.verdict = QUEUED, None
        dead = u.db.get(SteeringSession, third.session_id)
        assert dead is not None
        dead.status = FAILED
    with db.session() as s:
        camp = s.get(Campaign, c.id)
        assert camp is not None
        entries = {e.candidate_id: e for e in board.read(s, camp)}
        assert board.nearest_measured(s, camp, both) is not None
        assert board.nearest_measured(s, camp, both).id == skip.id  # type: ignore[union-attr]
        assert entries[both.id].knobs == {"stages": 2} and entries[both.id].layer == "memory"
        assert entries[both.id].effects["decode"] == 1.2  # stages=2 alone, not x over the baseline
        assert board.knobs_of_source(edited.source) is None and board.knobs_of_source(both.source) is not None
        assert entries[edited.id].knobs == {} and entries[edited.id].layer == ""  # it claims no knob change
        seen = {e["candidate"]: e["setting"] for e in board.for_agents(s, list(entries.values()))
                if e["session_id"] == b.session_id}
        assert seen[3] is None and seen[2] == {**START, "stages": 2, "causal_skip": True}
        assert board.in_flight(s, camp) == []


def test_the_campaign_judge_discards_keeps_backups_and_retimes_a_contender(tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    c = new_campaign(db, settings)
    a, b, _ = members(db, c.id)
    with unit(db) as u:
        camp = u.db.get(Campaign, c.id)
        assert camp is not None
        lead, rep = judged(u, a.session_id, {**START, "stages": 2}, LEADER)
        assert first_verdict(u.db, camp, lead, None).verdict == LEADER  # the campaign's first correct kernel
        hooks.record(u, a.session_id, lead.id or 0, rep, first_verdict(u.db, camp, lead, None))
        bad, _ = judged(u, b.session_id, START, REJECTED, passed=False)
        assert first_verdict(u.db, camp, bad, None).verdict == DISCARDED
        slow, _ = judged(u, b.session_id, START, LEADER)  # its own session's leader, slower than the campaign's
        look = first_verdict(u.db, camp, slow, None)
        assert look.verdict == BACKUP and "not faster than the campaign leader" in look.reason
        fast, _ = judged(u, b.session_id, {**START, "stages": 2, "softmax_exp": "exp2_folded",
                                           "smem_layout": "swizzle"}, LEADER)
        look = first_verdict(u.db, camp, fast, None)
        assert look.verdict == CONTENDER and look.retime_against is not None and look.retime_against.id == lead.id
        # The re-time is candidate vs campaign leader, interleaved: its ratio decides.
        won = report(START)  # 2.0x: its speedup_vs_baseline here is the ratio over the leader
        assert after_retime(look, fast, won).verdict == LEADER
        lost = report(None)  # 1.0x: no faster than the leader when timed side by side
        final = after_retime(look, fast, lost)
        assert final.verdict == BACKUP and "campaign leader" in final.reason
        # Re-timed already against the same kernel by its own session's judge: no second re-time,
        # whichever way that re-time went.
        assert first_verdict(u.db, camp, fast, lead.id).verdict == LEADER
        fast.verdict, fast.verdict_reason = BACKUP, "faster in its own run, but 0.999x against the leader"
        kept = first_verdict(u.db, camp, fast, lead.id)
        assert kept.verdict == BACKUP and kept.retime_against is None and "0.999x" in kept.reason
        assert first_verdict(u.db, camp, fast, None).verdict == CONTENDER  # re-timed against another kernel


def test_a_campaign_plateau_switches_each_stalled_agent_to_a_strategy_nobody_tried(tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    # Agents start on tiling, memory, math. Three kernels count: the second agent's first one is
    # the common start again, which the budget and the window do not count.
    c = new_campaign(db, settings, plateau_window=2)
    ms = members(db, c.id)
    assert [m.tried for m in ms] == [["tiling"], ["memory"], ["math"]]
    with unit(db) as u:
        for m in ms[:2]:  # two agents without a new leader of their own; the third is silent
            first, rep = judged(u, m.session_id, START, "backup")
            hooks.record(u, m.session_id, first.id or 0, rep, first_verdict(u.db, u.db.get(Campaign, c.id), first,
                                                                            None))
            again, rep = judged(u, m.session_id, START, "backup")
            hooks.record(u, m.session_id, again.id or 0, rep, first_verdict(u.db, u.db.get(Campaign, c.id), again,
                                                                            None))
    ms = members(db, c.id)
    with db.session() as s:
        sent = list(s.exec(select(Intervention).where(Intervention.author == "campaign")))
        camp = s.get(Campaign, c.id)
    new = [m.tried[-1] for m in ms[:2]]
    assert ms[2].tried == ["math"] and len(sent) == 2  # the third was not stalled
    assert set(new) <= set(LAYERS) - {"tiling", "memory", "math"} and new[0] != new[1]
    assert all(i.text.startswith(hooks.SWITCH_PREFIX) for i in sent)
    assert camp is not None and camp.last_leader_at == camp.evaluations and "plateau: switched" in camp.detail
    # The offline agent follows the switch.
    agent = OfflineAgent(TASK, {"seed": 0})
    import asyncio

    asyncio.run(agent.step(Feedback()))
    step = asyncio.run(agent.step(Feedback([ToolResult("offline-1", "submit_candidate", True, "",
                                                       {"verdict": LEADER, "visible": {"geomean_vs_baseline": 2.0}})],
                                           [SteeringMessage(1, "information", "steer", sent[0].text, "campaign")])))
    assert agent.focus == new[0] and f"switches me from tiling to {new[0]}" in step.text


def test_the_budget_over_all_agents_finishes_the_campaign_and_stops_every_member(tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    c = new_campaign(db, settings, budget_evaluations=2, start=True)
    a, b, _ = members(db, c.id)
    with unit(db) as u:
        for m in (a, b, b):  # b's first kernel is the common start again: not counted
            x, rep = judged(u, m.session_id, START, "backup")
            hooks.record(u, m.session_id, x.id or 0, rep, first_verdict(u.db, u.db.get(Campaign, c.id), x, None))
    with db.session() as s:
        view = campaign_view(s, c.id or 0)
    assert view.campaign.status == "finished" and "budget of 2 evaluations" in view.campaign.detail
    assert {r["status"] for r in view.leaderboard} == {"stopped"}


def test_a_kernel_overtaken_while_it_was_judged_joins_the_backups_instead_of_taking_the_lead() -> None:
    from app.domain.campaigns.campaign_judge import CampaignJudgement, still_leads
    from app.store.campaign_models import BACKUP as CAMPAIGN_BACKUP
    from app.store.campaign_models import LEADER as CAMPAIGN_LEADER
    from app.store.campaign_models import Campaign
    from app.store.models import Candidate

    # Two members judged at once: b won its re-time against the old leader (2.0x), but a (2.66x)
    # took the lead meanwhile; b at 2.28x must not replace it.
    camp = Campaign(title="race", leader_candidate_id=1, leader_speedup=2.66, min_leader_gain=0.01)
    b = Candidate(id=2, session_id=2, number=3, source="", speedup=2.28)
    won = CampaignJudgement(CAMPAIGN_LEADER, "2.280x vs the campaign leader's 2.000x")
    late = still_leads(camp, b, won)
    assert late.verdict == CAMPAIGN_BACKUP and "took the campaign lead at 2.660x" in late.reason
    faster = Candidate(id=3, session_id=2, number=4, source="", speedup=2.9)
    assert still_leads(camp, faster, won) is won  # beats the leader of now as well: it leads
    assert still_leads(Campaign(title="first"), b, won) is won  # no leader yet


def test_the_agents_common_start_is_paid_once_and_never_leads_twice(tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    c = new_campaign(db, settings, budget_evaluations=3)
    a, b, d = members(db, c.id)
    with unit(db) as u:
        camp = u.db.get(Campaign, c.id)
        assert camp is not None
        start_a, rep = judged(u, a.session_id, START, LEADER)
        hooks.record(u, a.session_id, start_a.id or 0, rep, first_verdict(u.db, camp, start_a, None))
        # The same first kernel from another agent, measured a little faster by noise: a backup
        # that names the kernel it repeats, posted, not counted, no re-time against the leader.
        start_b, rep = judged(u, b.session_id, START, LEADER)
        start_b.speedup = (start_a.speedup or 0) * 1.2
        look = first_verdict(u.db, camp, start_b, None)
        assert look.verdict == BACKUP and not look.counted and look.retime_against is None
        assert "common start" in look.reason and "#1" in look.reason
        hooks.record(u, b.session_id, start_b.id or 0, rep, look)
        assert camp.evaluations == 1 and camp.leader_candidate_id == start_a.id
        # Another first kernel (a different port) counts, and so does an agent repeating its own
        # kernel later: only the common start is free, so a loop of repeats still spends the budget.
        other, rep = judged(u, d.session_id, {**START, "stages": 2}, LEADER)
        assert first_verdict(u.db, camp, other, None).counted
        again, rep = judged(u, b.session_id, START, BACKUP)
        look = first_verdict(u.db, camp, again, None)
        assert look.counted and look.verdict == BACKUP
        hooks.record(u, b.session_id, again.id or 0, rep, look)
        assert camp.evaluations == 2
    with db.session() as s:
        entries = list(s.exec(select(BoardEntry).where(BoardEntry.campaign_id == c.id)))
        events = [e.payload for e in s.exec(select(Event).where(Event.kind == "board").order_by(Event.id))]
    assert [e.candidate_number for e in entries] == [1, 1, 2]
    assert entries[1].summary.endswith("(the agents' common start again, not counted)")
    assert "not counted" not in entries[0].summary + entries[2].summary
    assert [e["counted"] for e in events] == [True, False, True]


def test_a_correct_start_is_not_excused_by_a_twin_that_failed(tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    c = new_campaign(db, settings)
    a, b, _ = members(db, c.id)
    with unit(db) as u:
        camp = u.db.get(Campaign, c.id)
        assert camp is not None
        failed, rep = judged(u, a.session_id, START, REJECTED, passed=False)  # a transient failure
        hooks.record(u, a.session_id, failed.id or 0, rep, first_verdict(u.db, camp, failed, None))
        twin, rep = judged(u, b.session_id, START, LEADER)
        look = first_verdict(u.db, camp, twin, None)
        assert look.verdict == LEADER and look.counted  # the campaign's first correct kernel
