"""The offline search agent: greedy inside one layer of the kernel family, stalls and declares
a limit like a greedy agent, moves to the layer a question names, deterministic for a seed.
Its steps are driven with synthetic evaluations (tests/family_model.py: real rendered
kernels, a fixed speed table); one session runs through the real runner and judge."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.engine.agents.base import (
    DECLARE_DONE,
    SUBMIT_CANDIDATE,
    AgentConfigError,
    AgentStep,
    Feedback,
    SteeringMessage,
    Task,
    ToolResult,
)
from app.engine.agents.offline import OfflineAgent, asks_what_was_not_tried, layer_mentions, start_knobs
from app.settings import PROJECT_ROOT
from app.store.models import LEADER, PAUSED, PLATEAU
from harness.scenario import Scenario
from kernels.attention.family import KNOB_LAYER, default_knobs, knobs_from_mapping
from tests.family_model import SyntheticEvaluator, geomean_speed, knobs_of_source
from tests.server_support import events, running_app, wait_for, wait_status

SCENARIOS = [
    Scenario("prefill-d128-causal", "prefill", 2, 2048, 2048, 16, 16, 128, causal=True),
    Scenario("prefill-d64-full", "prefill", 4, 1024, 1024, 16, 16, 64, causal=False),
    Scenario("decode-d128", "decode", 16, 1, 8192, 32, 8, 128, causal=True),
    Scenario("chunk-d256-causal", "chunked", 1, 512, 8192, 8, 4, 256, causal=True, hidden=True),
]
TASK = Task("attention-forward", "cuda", "no goal", "", [s.to_dict() for s in SCENARIOS if not s.hidden])
WHICH_LAYER = ("Which layer have you not touched at all so far - how data reaches shared memory, which "
               "instructions do the math, how the grid is scheduled, or how the mask is applied?")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def agent(**config: Any) -> OfflineAgent:
    """Today's greedy agent (the control) unless the test names a strategy."""
    return OfflineAgent(TASK, {"strategy": "greedy", **config})


def changed_knobs(step: AgentStep, base: dict[str, Any]) -> list[str]:
    knobs = knobs_of_source(step.tool_calls[0].args["source"])
    assert knobs is not None
    return [k for k, v in knobs.items() if v != base[k]]


class Campaign:
    """Plays the runner and the judge for an offline agent: every submitted kernel is 'timed'
    by the speed table, the judge keeps a leader, a plateau (or a declared limit) pauses, and
    each pause is answered by a question or resumed without one."""

    def __init__(self, a: OfflineAgent, questions: list[str] | None, plateau: int = 3) -> None:
        self.agent, self.questions, self.plateau = a, list(questions or []), plateau
        self.leader = 1.0
        self.evaluations = 0
        self.since_leader = 0
        self.pauses: list[str] = []
        self.steps: list[AgentStep] = []

    def play(self, evaluations: int) -> float:
        feedback = Feedback()
        while self.evaluations < evaluations:
            step = run(self.agent.step(feedback))
            self.steps.append(step)
            results, paused = [], ""
            for call in step.tool_calls:
                if call.name == DECLARE_DONE:
                    paused = "declared_limit"
                    results.append(ToolResult(call.call_id, call.name, True, "Noted."))
                    continue
                knobs = knobs_of_source(call.args["source"])
                assert knobs is not None
                speed = geomean_speed(knobs, [s for s in SCENARIOS if not s.hidden])
                self.evaluations += 1
                verdict = "backup"
                if speed > self.leader * 1.01:
                    self.leader, verdict, self.since_leader = speed, LEADER, 0
                else:
                    self.since_leader += 1
                results.append(ToolResult(call.call_id, call.name, True, f"{verdict} {speed:.3f}x",
                                          {"verdict": verdict, "visible": {"geomean_vs_baseline": speed}}))
                if self.since_leader >= self.plateau:
                    paused, self.since_leader = "plateau", 0
            messages = []
            if paused:
                self.pauses.append(paused)
                if self.questions:
                    messages = [SteeringMessage(len(self.pauses), "question", "steer", self.questions.pop(0), "bank")]
            feedback = Feedback(results, messages)
        return self.leader


def test_it_starts_from_the_first_port_then_tries_only_neighbours_in_its_focus_layer() -> None:
    a = agent(seed=1)
    first = run(a.step(Feedback()))
    assert first.tool_calls[0].name == SUBMIT_CANDIDATE and first.tool_calls[0].args["title"] == "first port"
    start = start_knobs("first-port").to_dict()
    assert knobs_of_source(first.tool_calls[0].args["source"]) == start
    feedback = Feedback([ToolResult(first.tool_calls[0].call_id, SUBMIT_CANDIDATE, True, "",
                                    {"verdict": LEADER, "visible": {"geomean_vs_baseline": 2.0}})])
    for _ in range(5):
        step = run(a.step(feedback))
        [changed] = changed_knobs(step, start)
        assert KNOB_LAYER[changed] == "tiling"
        feedback = Feedback([ToolResult(step.tool_calls[0].call_id, SUBMIT_CANDIDATE, True, "",
                                        {"verdict": "backup", "visible": {"geomean_vs_baseline": 1.9}})])


def test_the_same_seed_gives_the_same_search_and_another_seed_another_order() -> None:
    def titles(seed: int) -> list[str]:
        c = Campaign(agent(seed=seed), questions=None)
        c.play(8)
        return [call.args.get("title", call.name) for s in c.steps for call in s.tool_calls]

    assert titles(3) == titles(3)
    assert titles(3) != titles(4)


def test_a_new_leader_moves_the_search_to_its_neighbourhood() -> None:
    a = agent(seed=0)
    first = run(a.step(Feedback()))
    step = run(a.step(Feedback([ToolResult(first.tool_calls[0].call_id, SUBMIT_CANDIDATE, True, "",
                                           {"verdict": LEADER, "visible": {"geomean_vs_baseline": 2.0}})])))
    winner = knobs_of_source(step.tool_calls[0].args["source"])
    assert winner is not None
    step2 = run(a.step(Feedback([ToolResult(step.tool_calls[0].call_id, SUBMIT_CANDIDATE, True, "",
                                            {"verdict": LEADER, "visible": {"geomean_vs_baseline": 2.2}})])))
    assert len(changed_knobs(step2, winner)) == 1  # one knob away from the new leader, not the start
    assert a.best == winner and a.has_leader and step2.tool_calls[0].args["parent"] == "leader"


def test_it_stalls_declares_the_limit_then_circles_when_resumed_without_a_question() -> None:
    a = agent(seed=0, focus="masking")  # masking has two neighbours: a quick stall
    feedback = Feedback()
    declared: AgentStep | None = None
    for _ in range(4):
        step = run(a.step(feedback))
        if step.tool_calls[0].name == DECLARE_DONE:
            declared = step
            break
        feedback = Feedback([ToolResult(step.tool_calls[0].call_id, SUBMIT_CANDIDATE, True, "",
                                        {"verdict": "backup", "visible": {"geomean_vs_baseline": 1.0}})])
    assert declared is not None and "this is the limit" in declared.text
    assert "this is the limit" in declared.tool_calls[0].args["reason"]
    again = run(a.step(Feedback(turn_ended=True)))  # resumed, no message
    assert again.tool_calls[0].name == SUBMIT_CANDIDATE and "Retrying" in again.text
    informed = run(a.step(Feedback(messages=[SteeringMessage(1, "information", "steer",
                                                             "The grid has 132 SMs.", "ana")])))
    assert a.focus == "masking" and "keep tuning masking" in informed.text


def test_a_question_that_names_another_layer_moves_the_focus_there() -> None:
    a = agent(seed=0)
    run(a.step(Feedback()))
    q = "With a causal mask, how many key blocks past the diagonal does each query tile still visit?"
    step = run(a.step(Feedback(messages=[SteeringMessage(1, "question", "steer", q, "ana")])))
    assert a.focus == "masking" and "from tiling to masking" in step.text
    [changed] = changed_knobs(step, start_knobs("first-port").to_dict())
    assert KNOB_LAYER[changed] == "masking"


def test_a_question_about_what_it_has_not_tried_moves_it_to_its_least_explored_layer() -> None:
    a = agent(seed=0)
    c = Campaign(a, questions=None, plateau=100)
    c.play(4)  # the first port plus three tiling variants
    run(a.step(Feedback(messages=[SteeringMessage(1, "question", "steer", WHICH_LAYER, "bank")])))
    assert a.focus != "tiling" and a.layer_evals[a.focus] == 0
    assert asks_what_was_not_tried(WHICH_LAYER) and not asks_what_was_not_tried("Is the grid too small?")
    assert set(layer_mentions("How many stages does the cp.async pipeline keep in flight?")) == {"memory"}


def test_questions_at_each_pause_beat_resuming_without_one_on_the_same_budget() -> None:
    bank = [WHICH_LAYER,
            "With one to four queries and thousands of keys, how many SMs does a decode scenario keep busy?",
            "While the math runs on one K/V tile, is anything already loading the next one - how many stages?",
            "How many exponentials per clock can an SM issue compared with its matrix rate?"] * 3
    asked = Campaign(agent(seed=2), bank)
    silent = Campaign(agent(seed=2), questions=None)
    with_questions, without = asked.play(20), silent.play(20)
    assert asked.pauses and silent.pauses
    assert with_questions > 1.5 * without
    moved = {m["to"] for m in asked.agent.moves}
    assert {"masking", "scheduling"} <= moved
    assert silent.agent.focus == "tiling"


def test_snapshot_and_restore_continue_the_same_search() -> None:
    a = agent(seed=5)
    c = Campaign(a, questions=None)
    c.play(3)
    b = agent(seed=5)
    b.restore(a.snapshot())
    feedback = Feedback()
    assert run(a.step(feedback)).tool_calls[0].args == run(b.step(feedback)).tool_calls[0].args


def test_configuration_is_checked_when_the_session_is_created() -> None:
    with pytest.raises(AgentConfigError, match="unknown offline option"):
        agent(temperature=1)
    with pytest.raises(AgentConfigError, match="focus"):
        agent(focus="everything")
    with pytest.raises(AgentConfigError, match="start"):
        agent(start="stages=9")
    # A start is a knob spec, never a file of the server's (no oracle for which paths exist),
    # and one too long for a file name is refused like any other bad spec.
    knob_file = PROJECT_ROOT / "kernels" / "attention" / "gallery" / "fa2-mma-a.knobs.json"
    assert knob_file.is_file()
    for start in (str(knob_file), "/etc/hostname", "x" * 300):
        with pytest.raises(AgentConfigError, match=r"start: .* is not key=value"):
            agent(start=start)
    with pytest.raises(AgentConfigError, match="cuda"):
        OfflineAgent(Task("attention-forward", "python-cpu", "", "", []), {})
    assert knobs_from_mapping(agent(start="default").best) == default_knobs()


# -- through the real runner and judge, with the synthetic timing ------------------------------


def test_offline_session_plateaus_pauses_and_a_question_moves_it_to_another_layer(
        tmp_path: Path) -> None:
    scenarios = [{k: v for k, v in s.to_dict().items() if k not in ("model", "tags")} for s in SCENARIOS]
    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator()) as client:
        r = client.post("/api/sessions", json={
            "title": "offline search", "agent": "offline", "agent_config": {"seed": 0, "strategy": "greedy"},
            "scenarios": scenarios, "thresholds": {"plateau_window": 3, "suspicious_jump": 50},
        })
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert r.json()["candidate_kind"] == "cuda"
        wait_status(client, sid, PAUSED, timeout=120)
        trigger = client.get(f"/api/sessions/{sid}/triggers").json()[-1]
        assert trigger["kind"] == PLATEAU
        before = client.get(f"/api/sessions/{sid}").json()
        r = client.post(f"/api/sessions/{sid}/interventions", json={"text": WHICH_LAYER, "author": "ana"})
        assert r.status_code == 201, r.text
        after = wait_for(client, sid, lambda s: s["status"] == PAUSED and s["evaluations"] > before["evaluations"],
                         timeout=120, what="the next pause")
        client.post(f"/api/sessions/{sid}/stop", json={"author": "test"})
        cands = client.get(f"/api/sessions/{sid}/candidates").json()
        evs = events(client, sid)
    titles = [c["title"] for c in cands]
    assert titles[0] == "first port" and all(t.startswith("tiling") for t in titles[1:4])
    leader = next(c for c in cands if c["number"] == after["leader_number"])
    assert not leader["title"].startswith("tiling") and after["leader_speedup"] > before["leader_speedup"]
    assert all(not c["title"].startswith("tiling") for c in cands[before["evaluations"]:])
    steps = [e["payload"]["text"] for e in evs if e["kind"] == "agent_step"]
    assert any("Your question moves me from tiling" in t for t in steps)
