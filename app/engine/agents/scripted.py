"""The scripted agent: replays a fixed list of steps, so that the whole loop (harness,
judge, triggers, pauses, steering) runs without a model. Tests and demos use it; the
built-in scripts are in app/engine/agents/scripts.py.

A script is a list of steps; each step is a dict with any of:
  say: text            what the agent says (declared-limit phrases here fire that trigger)
  submit: {...}|[...]  candidates: {"target": "module:function"} (python-cpu) or
                       {"path": NAME, "replace": [[old, new], ...]} (NAME a kernel the server lists,
                       app/domain/kernel_names.py) or {"source": text},
                       plus optional "title", "notes" and "parent" (a number, or "leader")
  read: N              read candidate N
  list: true           list the candidates
  declare_done: text   call the declare_done tool
  end_turn: true       end the turn without a tool call
Steering messages received are acknowledged in the next step's words. When the script
runs out the agent ends its turn saying so."""

from __future__ import annotations

from typing import Any

from app.domain.kernel_names import UnknownKernel, kernel_path
from app.engine.agents.base import (
    DECLARE_DONE,
    LIST_CANDIDATES,
    READ_CANDIDATE,
    SUBMIT_CANDIDATE,
    Agent,
    AgentConfigError,
    AgentStep,
    Feedback,
    Task,
    ToolCall,
    Usage,
)
from app.engine.agents.scripts import BUILTIN_SCRIPTS

STEP_KEYS = frozenset({"say", "submit", "read", "list", "declare_done", "end_turn"})


def resolve_script(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps named by `config`: {"script": name} or {"steps": [...]}."""
    if "steps" in config:
        steps = config["steps"]
    else:
        name = config.get("script", "cpu-demo")
        if name not in BUILTIN_SCRIPTS:
            raise AgentConfigError(
                f"unknown script {name!r}; built-in scripts: {', '.join(sorted(BUILTIN_SCRIPTS))}"
            )
        steps = BUILTIN_SCRIPTS[name].steps
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise AgentConfigError("a script is a list of steps, each a JSON object")
    for i, step in enumerate(steps, 1):
        unknown = set(step) - STEP_KEYS
        if unknown:
            raise AgentConfigError(
                f"step {i}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(STEP_KEYS))}"
            )
        for spec in _as_list(step.get("submit")):  # refused at creation, before anything is stored
            if not isinstance(spec, dict):
                raise AgentConfigError(f"step {i}: a submit entry is a JSON object")
            try:
                candidate_source(spec)
            except (TypeError, ValueError) as exc:
                raise AgentConfigError(f"step {i}: {exc}") from exc
    return steps


def candidate_source(spec: dict[str, Any]) -> str:
    """The source text a submit entry stands for."""
    if "target" in spec:
        return str(spec["target"])
    if "source" in spec:
        return str(spec["source"])
    if "path" in spec:  # a kernel the server lists, by name: never a file of the caller's choosing
        try:
            text = kernel_path(str(spec["path"]), "submitted").read_text()
        except UnknownKernel as exc:
            raise AgentConfigError(f"path: {exc}") from exc
        for pair in spec.get("replace", []):
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise AgentConfigError("replace: a list of [old, new] text pairs")
            old, new = pair
            if old not in text:
                raise AgentConfigError(f"{spec['path']}: the text to replace is not there: {old!r}")
            text = text.replace(old, new)
        return text
    raise AgentConfigError("a submit entry needs 'target', 'source' or 'path'")


class ScriptedAgent(Agent):
    name = "scripted"

    def __init__(self, task: Task, config: dict[str, Any]) -> None:
        super().__init__(task, config)
        self.steps = resolve_script(config)
        for step in self.steps:  # fail at creation, not halfway through a session
            for spec in _as_list(step.get("submit")):
                candidate_source(spec)
        self.position = 0
        self.calls = 0
        self.heard: list[str] = []

    async def step(self, feedback: Feedback) -> AgentStep:
        acknowledged = [f"I take the {m.kind} \"{m.text}\" into account." for m in feedback.messages]
        self.heard.extend(m.text for m in feedback.messages)
        if self.position >= len(self.steps):
            words = " ".join([*acknowledged, "My script has no further ideas."])
            return AgentStep(text=words, usage=Usage())
        step = self.steps[self.position]
        self.position += 1
        calls: list[ToolCall] = []
        for spec in _as_list(step.get("submit")):
            args: dict[str, Any] = {"source": candidate_source(spec)}
            for key in ("title", "notes", "parent"):
                if key in spec:
                    args[key] = spec[key]
            calls.append(self._call(SUBMIT_CANDIDATE, args))
        if "read" in step:
            calls.append(self._call(READ_CANDIDATE, {"number": int(step["read"])}))
        if step.get("list"):
            calls.append(self._call(LIST_CANDIDATES, {}))
        if "declare_done" in step:
            calls.append(self._call(DECLARE_DONE, {"reason": str(step["declare_done"])}))
        words = " ".join([*acknowledged, str(step.get("say", ""))]).strip()
        # Rough token accounting so that token budgets can be exercised without a model.
        usage = Usage(input_tokens=len(words) // 4 + 10, output_tokens=len(words) // 4 + 1)
        return AgentStep(text=words, tool_calls=calls, usage=usage)

    def _call(self, name: str, args: dict[str, Any]) -> ToolCall:
        self.calls += 1
        return ToolCall(name=name, args=args, call_id=f"call-{self.calls}")

    def snapshot(self) -> dict[str, Any]:
        return {"position": self.position, "calls": self.calls, "heard": self.heard}

    def restore(self, state: dict[str, Any]) -> None:
        self.position = int(state.get("position", 0))
        self.calls = int(state.get("calls", 0))
        self.heard = list(state.get("heard", []))


def _as_list(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
