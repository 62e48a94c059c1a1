"""Evolution mode's parent choice and its question-drawn mutations (with credit flowing back to
the question), and the offline agent's own plateau policy and its use of the board."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from sqlmodel import select

from app.domain.campaigns import evolution, hooks
from app.domain.campaigns.campaign_judge import after_retime, first_verdict
from app.domain.sessions import mark_delivered
from app.domain.steering import bank
from app.engine.agents.base import READ_BOARD, SUBMIT_CANDIDATE, AgentStep, Feedback, SteeringMessage, ToolResult
from app.engine.agents.offline import OfflineAgent, split_parent, start_knobs
from app.store.campaign_models import BACKUP, LEADER, Campaign, CampaignMember, Mutation
from app.store.models import Candidate, Intervention, SteeringSession
from kernels.attention.family import KNOB_LAYER, knobs_from_mapping, neighbours, render
from question_bank.evidence import question_evidence
from question_bank.models import BankUse
from tests.app.domain.campaigns.support import database, judged, new_campaign, report, unit
from tests.app.engine.agents.test_offline import TASK
from tests.app.engine.agents.test_offline import Campaign as Play
from tests.family_model import knobs_of_source

START = start_knobs("first-port").to_dict()


def test_the_judge_chooses_parents_from_leaders_and_backups_of_the_island_and_migrates(tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    bank.on_startup(db, semantic=False)
    c = new_campaign(db, settings, mode="evolution", agents=4, islands=2)
    with db.session() as s:
        ms = list(s.exec(select(CampaignMember).where(CampaignMember.campaign_id == c.id)))
    assert [m.island for m in ms] == [0, 1, 0, 1]
    with unit(db) as u:
        camp = u.db.get(Campaign, c.id)
        assert camp is not None
        a0, rep = judged(u, ms[0].session_id, START, LEADER)
        hooks.record(u, ms[0].session_id, a0.id or 0, rep, first_verdict(u.db, camp, a0, None))
        bad, rep = judged(u, ms[2].session_id, {**START, "split_kv": "1wave"}, "rejected", passed=False)
        hooks.record(u, ms[2].session_id, bad.id or 0, rep, first_verdict(u.db, camp, bad, None))
        b1, rep = judged(u, ms[1].session_id, {**START, "smem_layout": "swizzle"}, LEADER)
        look = first_verdict(u.db, camp, b1, None)  # faster than a0: re-timed against it, and it wins
        hooks.record(u, ms[1].session_id, b1.id or 0, rep, after_retime(look, b1, report(START)))
    with db.session() as s:
        muts = list(s.exec(select(Mutation).order_by(Mutation.id)))  # type: ignore[arg-type]
        camp = s.get(Campaign, c.id)
        assert camp is not None
        # One child ordered after each judged candidate; island 0's parent is its leader (never the
        # discarded kernel), island 1's its own kernel, then the 4th child migrates the campaign leader.
        assert [(m.island, m.parent_candidate_id, m.parent_verdict) for m in muts] == \
            [(0, a0.id, LEADER), (0, a0.id, LEADER), (1, b1.id, LEADER)]
        assert camp.leader_candidate_id == b1.id
        parent = evolution.choose_parent(s, camp, 0)
        assert parent is not None and parent.candidate.id == b1.id and "migration" in parent.why
        # Each child's instruction is a bank question, the parent named after it, and a bank use.
        m = muts[-1]
        item = s.get(Intervention, m.intervention_id)
        assert item is not None and item.author == "bank" and item.kind == "question"
        question, knobs = split_parent(item.text)
        assert question == m.question and question.endswith("?") and knobs == knobs_of_source(b1.source)
        use = s.exec(select(BankUse).where(BankUse.intervention_ref == str(item.id))).one()
        assert use.question_id == m.question_id and use.author == "bank" and use.trigger == "plateau"


def test_credit_of_a_mutation_flows_back_to_its_question(tmp_path: Path) -> None:
    db, settings = database(tmp_path)
    bank.on_startup(db, semantic=False)
    c = new_campaign(db, settings, mode="evolution", agents=1, start=True)
    with db.session() as s:
        [m] = list(s.exec(select(CampaignMember).where(CampaignMember.campaign_id == c.id)))
    with unit(db) as u:
        camp = u.db.get(Campaign, c.id)
        a, rep = judged(u, m.session_id, START, LEADER)
        session = u.db.get(SteeringSession, m.session_id)
        assert camp is not None and session is not None
        session.leader_id, session.leader_speedup, session.evaluations = a.id, a.speedup, 1
        hooks.record(u, m.session_id, a.id or 0, rep, first_verdict(u.db, camp, a, None))
        [mutation] = list(u.db.exec(select(Mutation)))
        item = u.db.get(Intervention, mutation.intervention_id)
        assert item is not None
        mark_delivered(u, session, [item])  # the runner delivers it; the use is not recorded twice
    with db.session() as s:
        assert len(list(s.exec(select(BankUse)))) == 1
    with unit(db) as u:  # the child is 1.2x better: a new leader within the credit window
        session = u.db.get(SteeringSession, m.session_id)
        assert session is not None
        child, _ = judged(u, m.session_id, {**START, "stages": 2}, LEADER, parent=a)
        session.leader_id, session.leader_speedup, session.evaluations = child.id, child.speedup, 2
        bank.credit_evaluation(u.db, session)
    with db.session() as s:
        stats = question_evidence(s)[mutation.question_id or 0]
        assert stats.credited == 1 and abs(stats.gain_percent - 20.0) < 0.01


def play_autonomous(policy: str, seed: int = 0) -> tuple[float, list[str], OfflineAgent]:
    a = OfflineAgent(TASK, {"strategy": "greedy", "seed": seed, "policy": policy})
    play = Play(a, questions=None)
    return play.play(24), play.pauses, a


def test_the_autonomous_policy_moves_on_by_itself_and_beats_waiting_for_a_question() -> None:
    silent, _, waiting = play_autonomous("questions")
    own, _, agent = play_autonomous("autonomous")
    assert {m["to"] for m in waiting.moves} <= {"tiling"}  # without questions it never leaves tiling
    moves = [m for m in agent.moves if m["why"].startswith("own policy")]
    assert len({m["to"] for m in moves}) >= 2 and own > silent * 1.3
    assert all(m["text"] == "" for m in moves)  # no message moved it


def submitted(step: AgentStep) -> dict[str, object] | None:
    """The knob changes against the first port of the step's submission (None: no submission)."""
    call = step.tool_calls[0]
    k = knobs_of_source(call.args["source"]) if call.name == SUBMIT_CANDIDATE else None
    return None if k is None else {n: v for n, v in k.items() if v != START[n]}


def answered(step: AgentStep, verdict: str, speedup: float) -> Feedback:
    return Feedback([ToolResult(step.tool_calls[0].call_id, SUBMIT_CANDIDATE, True, "",
                                {"verdict": verdict, "visible": {"geomean_vs_baseline": speedup}})])


def test_the_board_keeps_it_from_failures_elsewhere_and_brings_it_what_worked_in_any_layer() -> None:
    a = OfflineAgent(TASK, {"strategy": "greedy", "seed": 0, "focus": "memory", "board": True, "policy": "autonomous"})
    first = asyncio.run(a.step(Feedback()))
    assert [c.name for c in first.tool_calls] == [SUBMIT_CANDIDATE, READ_BOARD]
    read = first.tool_calls[1]
    board = [{"knobs": {"stages": 2}, "layer": "memory", "campaign_verdict": "discarded", "effects": {}},
             {"knobs": {"smem_layout": "swizzle"}, "layer": "memory", "campaign_verdict": "leader",
              "effects": {"prefill": 1.05}},
             {"knobs": {"causal_skip": True}, "layer": "masking", "campaign_verdict": "backup",
              "effects": {"prefill": 1.8}},
             {"knobs": {"wg_overlap": False}, "layer": "hopper", "campaign_verdict": "leader",
              "effects": {"prefill": 1.1}}]  # needs mma=wgmma: no valid setting on this leader
    step = asyncio.run(a.step(Feedback([
        answered(first, LEADER, 2.0).results[0],
        ToolResult(read.call_id, READ_BOARD, True, "", {"entries": board})])))
    # Both changes that worked elsewhere, in another layer too, on its own leader in one kernel;
    # never the one discarded elsewhere, never one that makes no valid setting here.
    assert submitted(step) == {"smem_layout": "swizzle", "causal_skip": True}
    assert step.tool_calls[0].args["title"] == "board: causal_skip=True, smem_layout=swizzle"
    # Not faster together: then each alone, the larger gain first, then its own layer search.
    step = asyncio.run(a.step(answered(step, BACKUP, 1.9)))
    assert submitted(step) == {"causal_skip": True}
    step = asyncio.run(a.step(answered(step, BACKUP, 1.9)))
    assert submitted(step) == {"smem_layout": "swizzle"}
    seen = []
    feedback = answered(step, BACKUP, 1.9)
    for _ in range(12):
        step = asyncio.run(a.step(feedback))
        k = submitted(step)
        if k is None:
            break
        seen.append(k)
        feedback = answered(step, BACKUP, 1.9)
    assert seen and {"smem_layout": "swizzle", "causal_skip": True} not in seen
    assert {"stages": 2} not in seen and {"causal_skip": True} not in seen  # nothing retried or repeated
    # Its own plateau: it left memory for the layer the campaign explored least (the board's
    # entries and its own evaluations), not for the board's best gain: the gain came by adoption.
    moved = next(m for m in a.moves if m["why"].startswith("own policy"))
    explored = {layer: a.board_layers.get(layer, 0) for layer in ("tiling", "math", "scheduling", "masking")}
    assert moved["from"] == "memory" and "explored least" in moved["why"]
    assert explored[moved["to"]] == 0 and moved["to"] != "masking"


def test_a_message_comes_before_the_board_and_a_new_leader_is_adopted_onto_once() -> None:
    a = OfflineAgent(TASK, {"strategy": "greedy", "seed": 1, "focus": "tiling", "board": True, "policy": "autonomous"})
    first = asyncio.run(a.step(Feedback()))
    board = [{"knobs": {"mma": "wgmma"}, "layer": "math", "campaign_verdict": "leader", "effects": {"gqa": 1.6}}]
    read = ToolResult(first.tool_calls[1].call_id, READ_BOARD, True, "", {"entries": board})
    question = SteeringMessage(1, "question", "steer", "How are the pipeline stages sized?", "bank")
    step = asyncio.run(a.step(Feedback([answered(first, LEADER, 2.0).results[0], read], [question])))
    assert a.focus == "memory" and submitted(step) != {"mma": "wgmma"}  # the question's layer, this step
    k = submitted(step)
    assert k is not None and len(k) == 1 and KNOB_LAYER[next(iter(k))] == "memory"
    step = asyncio.run(a.step(answered(step, LEADER, 2.2)))  # a new leader of its own
    assert submitted(step) == {**(k or {}), "mma": "wgmma"}  # the board's change, on that leader
    step = asyncio.run(a.step(answered(step, BACKUP, 2.1)))
    later = submitted(step)
    assert later is not None and "mma" not in later  # tried once on this leader, not again


def test_it_builds_on_the_boards_fastest_kernel_and_never_measures_what_another_agent_measured() -> None:
    a = OfflineAgent(TASK, {"strategy": "greedy", "seed": 2, "focus": "tiling", "board": True, "policy": "autonomous"})
    first = asyncio.run(a.step(Feedback()))
    fastest = knobs_from_mapping({**START, "stages": 2})
    others = neighbours(fastest, "tiling")
    assert len(others) >= 3
    # Another agent measured stages=2 (2.6x) and every tiling neighbour of it but the last two;
    # a third agent is measuring the second to last one right now.
    board = [{"knobs": {"stages": 2}, "layer": "memory", "campaign_verdict": "leader", "effects": {"prefill": 1.3},
              "speedup": 2.6, "setting": fastest.to_dict(), "author": "agent 2", "candidate": 2}]
    board += [{"knobs": {}, "layer": "tiling", "campaign_verdict": "backup", "effects": {"prefill": 0.99},
               "speedup": 2.5, "setting": n.to_dict(), "author": "agent 2", "candidate": 3 + i}
              for i, n in enumerate(others[:-2])]
    waiting = [{"session_id": 9, "candidate": 4, "author": "agent 3", "setting": others[-2].to_dict()}]
    read = ToolResult(first.tool_calls[1].call_id, READ_BOARD, True, "", {"entries": board, "in_flight": waiting})
    step = asyncio.run(a.step(Feedback([answered(first, LEADER, 2.0).results[0], read])))
    assert a.best == fastest.to_dict() and a.foreign_parent and "agent 2's kernel #2" in step.text
    k = knobs_of_source(step.tool_calls[0].args["source"])
    assert k == others[-1].to_dict()  # the one tiling neighbour nobody measured or is measuring
    assert "parent" not in step.tool_calls[0].args  # its parent lives in another session
    # Its session's judge calls it a leader (it beats #1 of its own session) but it is slower
    # than the kernel it built on: that stays its parent. A faster one takes over.
    step = asyncio.run(a.step(answered(step, LEADER, 2.4)))
    assert a.best == fastest.to_dict() and a.best_speedup == 2.6
    k = knobs_of_source(step.tool_calls[0].args["source"])
    step = asyncio.run(a.step(answered(step, LEADER, 2.9)))
    assert a.best == k and a.best_speedup == 2.9 and not a.foreign_parent


def test_it_follows_the_campaign_leader_not_a_faster_backup_and_stacks_one_value_per_knob() -> None:
    a = OfflineAgent(TASK, {"strategy": "greedy", "seed": 3, "focus": "memory", "board": True, "policy": "autonomous"})
    first = asyncio.run(a.step(Feedback()))
    leader = {**START, "causal_skip": True}
    lost = {**START, "split_kv": "1wave"}  # faster in its own run, lost its re-time: a backup
    board = [{"knobs": {"causal_skip": True}, "layer": "masking", "campaign_verdict": "leader",
              "effects": {"prefill": 1.3}, "speedup": 2.6, "setting": leader, "author": "agent 2", "candidate": 2},
             {"knobs": {"split_kv": "1wave"}, "layer": "scheduling", "campaign_verdict": "backup",
              "effects": {"decode": 1.4}, "speedup": 2.9, "setting": lost, "author": "agent 3", "candidate": 2},
             {"knobs": {"tile_d64": "64x32x4"}, "layer": "tiling", "campaign_verdict": "backup",
              "effects": {"prefill": 1.2}, "speedup": 2.1, "author": "agent 4", "candidate": 2},
             {"knobs": {"tile_d64": "128x32x8"}, "layer": "tiling", "campaign_verdict": "backup",
              "effects": {"prefill": 1.05}, "speedup": 2.05, "author": "agent 4", "candidate": 3},
             # worked in one lineage, failed in another: not adopted
             {"knobs": {"stages": 2}, "layer": "memory", "campaign_verdict": "backup",
              "effects": {"prefill": 1.2}, "speedup": 2.2, "author": "agent 4", "candidate": 4},
             {"knobs": {"stages": 2}, "layer": "memory", "campaign_verdict": "discarded",
              "effects": {}, "speedup": None, "author": "agent 3", "candidate": 3}]
    read = ToolResult(first.tool_calls[1].call_id, READ_BOARD, True, "", {"entries": board})
    step = asyncio.run(a.step(Feedback([answered(first, LEADER, 2.0).results[0], read])))
    assert a.best == leader and a.best_speedup == 2.6  # the crowned kernel, not the faster backup
    # One kernel with every change that worked elsewhere, one value per knob (the best gain's).
    assert submitted(step) == {"causal_skip": True, "split_kv": "1wave", "tile_d64": "64x32x4"}
    assert step.tool_calls[0].args["title"] == "board: split_kv=1wave, tile_d64=64x32x4"
    # Restored mid-way (a server restart), it takes the same next step as without the restart.
    feedback = answered(step, BACKUP, 2.5)
    twin = OfflineAgent(TASK, {"strategy": "greedy", "seed": 3, "focus": "memory", "board": True,
                               "policy": "autonomous"})
    twin.restore(json.loads(json.dumps(a.snapshot())))
    mine, theirs = asyncio.run(a.step(feedback)), asyncio.run(twin.step(feedback))
    assert mine.text == theirs.text and [c.args for c in mine.tool_calls] == [c.args for c in theirs.tool_calls]
    assert twin.followed and twin.board_best == a.board_best and twin.board_measured == a.board_measured


def test_a_parent_line_makes_the_given_setting_the_agents_parent() -> None:
    a = OfflineAgent(TASK, {"strategy": "greedy", "seed": 0})
    asyncio.run(a.step(Feedback()))
    parent = {**START, "split_kv": "1wave"}
    source = render(knobs_from_mapping(parent))
    text = evolution.instruction("Which layer have you not touched: how is the grid scheduled?",
                                 Candidate(session_id=3, number=4, author="offline", source=source))
    step = asyncio.run(a.step(Feedback([], [SteeringMessage(1, "question", "steer", text, "bank")])))
    assert a.best == parent and a.foreign_parent and a.focus == "scheduling"
    assert "parent" not in step.tool_calls[0].args  # its parent lives in another session
