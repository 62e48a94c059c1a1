"""Claude through the `anthropic` SDK, working with the workspace tools (Task.tools, by default
`Task.tools`; each tool is defined in app/engine/tools/).

One step is one assistant turn: the agent sends the results of its last tool calls (and any
steering message delivered at that boundary) and returns the tool calls of Claude's reply;
the runner executes them. Behind a step there may be several API calls (a `pause_turn` to
continue, a reply cut at the output limit, a context that had to be trimmed); each is
recorded as a `model_call` event with its tokens (input, output, cache read, cache write)
and cost. The stable prefix (tools and system prompt) and the conversation so far carry
`cache_control` breakpoints; old tool results are trimmed when the context grows.

Retries and timeouts are explicit: the SDK retries connection errors, 408/409/429 and 5xx
`max_retries` times with backoff, each request limited to `timeout_s`. When the API is still
unavailable the step ends without tool calls and says why (the session pauses); the unsent
results are kept and go out with the next step. A bad key or model fails the session."""

from __future__ import annotations

import copy
import json
import time
from typing import Any, cast

import anthropic
import httpx2

from app.engine.agents.base import (
    CONSULT_BANK,
    DECLARE_DONE,
    EDIT_KERNEL,
    EVALUATE,
    READ_KERNEL,
    READ_LESSONS,
    WRITE_KERNEL,
    Agent,
    AgentConfigError,
    AgentStep,
    Feedback,
    Task,
    ToolCall,
    ToolResult,
    Usage,
)
from app.engine.agents.claude_config import (
    DEFAULT_MODEL,
    EPHEMERAL,
    MAX_CONTINUATIONS,
    MAX_RESULT_CHARS,
    TRIMMED_KEEP_CHARS,
    ClaudeConfig,
    Price,
    price_of,
    validate_config,
)
from app.settings import anthropic_api_key

__all__ = ["DEFAULT_MODEL", "ClaudeAgent", "ClaudeConfig", "Price", "price_of", "validate_config"]


def system_prompt(task: Task) -> str:
    cuda = task.candidate_kind == "cuda"
    contract = task.contract
    scenarios = "\n".join(
        f"- {s['name']}: batch {s['batch']}, {s['seqlen_q']} queries x {s['seqlen_k']} keys, heads "
        f"{s['heads_q']}/{s['heads_kv']}, head_dim {s['head_dim']}{', causal' if s.get('causal') else ''}"
        for s in task.visible_scenarios
    )
    what = ("one single-file CUDA kernel (.cu)" if cuda
            else "a python `module:function` stand-in kernel run on the CPU (a test session)")
    rules = (
        "- A candidate is ONE .cu file. It may include CUDA toolkit headers (cuda_runtime.h, cuda_bf16.h, "
        "cuda_fp16.h, mma.h, cuda/pipeline, cooperative_groups, cuda/barrier, inline PTX) and contract.h, "
        "nothing else: no cuBLAS, cuDNN, CUTLASS, CuTe, Thrust or CUB; no file, network, thread, process or "
        "environment access; no extra streams or graphs. It is built with nvcc -O3 -std=c++17 for sm_90a.\n"
        if cuda else ""
    )
    knowledge = f"\n\n{task.knowledge}\nMore with {READ_LESSONS}." if task.knowledge else ""
    return f"""You are a kernel engineer improving {what} for the problem "{task.problem}".

Goal: {task.goal}. The harness measures it on all scenarios, including hidden ones you never see; \
only numbers you did not measure yourself count. Your own claims never end the session.

The contract every kernel implements:
{contract}

Rules of the harness:
{rules}- Every evaluation runs in a fresh process: static checks, compile, then correctness on fresh random \
inputs per trial (several distributions, large logits, two trials at different addresses, output pre-filled \
with NaN, inputs checked unchanged, two runs bit-identical), tolerance twice the bf16 reference error.
- Timing is interleaved with the baseline (and peers such as cuDNN), L2 flushed before each call, median \
of many; work hidden on another stream shows in a wall-clock cross-check. A speedup faster than the \
roofline or over 100x the baseline is flagged as impossible and blocks a verdict.
- The judge: a failure is rejected; correct but not faster than the leader is kept as a backup; correct \
and faster becomes the leader after a re-time interleaved with the previous leader.

Visible scenarios:
{scenarios or '- (none listed)'}

How to work: your working copy starts as the leader (or the baseline). Read it with {READ_KERNEL}, change \
it with {EDIT_KERNEL} (exact replacements) or {WRITE_KERNEL} (whole file), and run it with {EVALUATE}. \
Use read_findings to recall what worked and what failed. When progress stalls or before you think you \
are done, call {CONSULT_BANK}. Call {DECLARE_DONE} only with the measurement that shows the limit.
People may steer you: their messages arrive next to your tool results. Treat a question as a \
hypothesis to check with a measurement, answer it briefly, and act on it.{knowledge}"""


def _block_param(block: Any) -> dict[str, Any]:
    """An assistant content block as a request parameter (the response schema has extra fields)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    dumped: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return dumped


def _tool_uses(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [b for b in content if b.get("type") == "tool_use"]


class ModelUnavailable(Exception):
    """The API did not answer after the SDK's retries."""


class ClaudeAgent(Agent):
    name = "claude"

    def __init__(self, task: Task, config: dict[str, Any], client: anthropic.AsyncAnthropic | None = None) -> None:
        super().__init__(task, config)
        self.settings = ClaudeConfig.parse(config)
        self._client = client
        self.messages: list[dict[str, Any]] = []
        self.calls = 0
        self.context_tokens = 0  # size of the last request, as the API counted it
        self.trimmed = 0
        self.tools = copy.deepcopy(task.tools)
        self.tools[-1]["cache_control"] = EPHEMERAL  # tools + system: the stable, cached prefix
        self.system = [{"type": "text", "text": system_prompt(task), "cache_control": EPHEMERAL}]

    # -- the client -------------------------------------------------------------------------

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            key = anthropic_api_key()
            if key is None:
                raise AgentConfigError("ANTHROPIC_API_KEY is not set: the claude agent needs an API key "
                                       "(the offline agent needs none)")
            self._client = anthropic.AsyncAnthropic(
                api_key=key,
                max_retries=self.settings.max_retries,
                timeout=httpx2.Timeout(self.settings.timeout_s, connect=10.0),
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    # -- one step ---------------------------------------------------------------------------

    async def step(self, feedback: Feedback) -> AgentStep:
        self._add_user_content(feedback)
        usage = Usage()
        records: list[dict[str, Any]] = []
        words: list[str] = []
        for _ in range(1 + MAX_CONTINUATIONS):
            if self.context_tokens > self.settings.trim_at_tokens:
                self.trim(self.settings.keep_recent)
            try:
                response, seconds = await self._create()
            except ModelUnavailable as exc:
                words.append(f"The model API did not answer ({exc}); resume the session to try again.")
                return AgentStep(" ".join(words).strip(), [], usage, records)
            call_usage = self._record(response, seconds, usage, records)
            self.context_tokens = (call_usage.input_tokens + call_usage.cache_read_tokens
                                   + call_usage.cache_write_tokens + call_usage.output_tokens)
            content = [_block_param(b) for b in response.content]
            text = " ".join(b["text"] for b in content if b["type"] == "text").strip()
            if text:
                words.append(text)
            reason = response.stop_reason
            if reason == "tool_use":
                self.messages.append({"role": "assistant", "content": content})
                calls = [ToolCall(b["name"], dict(b["input"]), b["id"]) for b in content if b["type"] == "tool_use"]
                return AgentStep(" ".join(words), calls, usage, records)
            if reason == "pause_turn":  # a long turn the API paused: send it back to continue
                self.messages.append({"role": "assistant", "content": content})
                continue
            if reason in ("max_tokens", "model_context_window_exceeded"):
                kept = [b for b in content if b["type"] != "tool_use"] or [{"type": "text", "text": "(cut off)"}]
                self.messages.append({"role": "assistant", "content": kept})
                if reason == "max_tokens":
                    note = (f"Your reply reached the output limit ({self.settings.max_tokens} tokens) before it "
                            "finished, so none of its tool calls ran. Continue; change a long kernel in parts "
                            f"with {EDIT_KERNEL} rather than rewriting it whole.")
                else:
                    if self.trimmed_everything():
                        words.append("The conversation no longer fits the model's context window.")
                        return AgentStep(" ".join(words), [], usage, records)
                    self.trim(keep_recent=2)
                    note = ("The context window filled up, so your reply was cut and none of its tool calls ran. "
                            "Old tool results were trimmed; read_findings recalls what was tried. Continue.")
                self.messages.append({"role": "user", "content": [{"type": "text", "text": note}]})
                continue
            # end_turn, stop_sequence, refusal (or a reason this SDK does not know): the turn ends.
            self.messages.append({"role": "assistant", "content": content or [{"type": "text", "text": "(no reply)"}]})
            if reason == "refusal":
                words.append("(The model declined to continue: stop reason 'refusal'.)")
            return AgentStep(" ".join(words), [], usage, records)
        words.append(f"(The model did not finish its turn within {1 + MAX_CONTINUATIONS} API calls.)")
        return AgentStep(" ".join(words), [], usage, records)

    def _add_user_content(self, feedback: Feedback) -> None:
        """The next user message: one tool_result per tool_use of the last reply, then the
        steering messages delivered at this boundary."""
        blocks: list[dict[str, Any]] = []
        if not self.messages:
            blocks.append({"type": "text", "text": self._begin()})
        else:
            results = {r.call_id: r for r in feedback.results}
            for use in _tool_uses(self.messages[-1]):
                r = results.get(use["id"])
                blocks.append(self._tool_result(use["id"], r))
        for m in feedback.messages:
            label = "A question" if m.kind == "question" else "Information"
            blocks.append({"type": "text", "text": f"[{label} from {m.author}, delivered at this tool boundary] "
                                                   f"{m.text}"})
        if not blocks:
            blocks.append({"type": "text", "text": "The session was resumed without a message. Continue."})
        if self.messages and self.messages[-1]["role"] == "user":
            # The last request never got an answer (the API was unavailable): extend it.
            self.messages[-1]["content"].extend(b for b in blocks if b["type"] != "tool_result")
        else:
            self.messages.append({"role": "user", "content": blocks})

    def _begin(self) -> str:
        """The first user message: where the working copy starts (a fork: the forked candidate)."""
        leader = self.task.leader
        if not leader:
            return ("Begin. Your working copy holds the leader, or the baseline while there is none; improve it "
                    "towards the goal.")
        speed = leader.get("speedup")
        shown = f", {speed:.3f}x over the baseline" if isinstance(speed, int | float) else ""
        origin = f" ({leader['origin']})" if leader.get("origin") else ""
        return (f"Begin. This session continues from candidate #{leader.get('number', 1)} "
                f"\u201c{leader.get('title', '')}\u201d{origin}{shown}: it leads, and your working copy holds its "
                "source. Improve it towards the goal.")

    @staticmethod
    def _tool_result(tool_use_id: str, r: ToolResult | None) -> dict[str, Any]:
        if r is None:
            return {"type": "tool_result", "tool_use_id": tool_use_id, "is_error": True,
                    "content": "This call was not executed."}
        text = r.text or "(no output)"
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n... ({len(text) - MAX_RESULT_CHARS} more characters cut)"
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
        if not r.ok:
            block["is_error"] = True
        return block

    async def _create(self) -> tuple[Any, float]:
        start = time.monotonic()
        try:
            # Plain dicts in the API's JSON schema (persisted as the agent's snapshot).
            response = await self.client.messages.create(
                model=self.settings.model, max_tokens=self.settings.max_tokens,
                system=cast(Any, self.system), tools=cast(Any, self.tools),
                messages=cast(Any, self._request_messages()),
            )
        except (anthropic.AuthenticationError, anthropic.PermissionDeniedError, anthropic.NotFoundError) as exc:
            raise AgentConfigError(f"the Claude API refused the request ({exc.status_code}): {_message(exc)}") from exc
        except anthropic.BadRequestError as exc:
            if "too long" in _message(exc) and not self.trimmed_everything():
                self.trim(keep_recent=2)
                return await self._create()
            raise AgentConfigError(f"the Claude API refused the request (400): {_message(exc)}") from exc
        except (anthropic.APIConnectionError, anthropic.RateLimitError, anthropic.InternalServerError,
                anthropic.APIStatusError) as exc:
            raise ModelUnavailable(f"{type(exc).__name__}: {_message(exc)}") from exc
        return response, time.monotonic() - start

    def _request_messages(self) -> list[dict[str, Any]]:
        """The conversation with a cache breakpoint on its last block, so the next request
        reads everything before it from the cache."""
        messages = copy.deepcopy(self.messages)
        last = messages[-1]["content"]
        cacheable = [b for b in last if b.get("type") in ("text", "tool_use", "tool_result")] \
            if isinstance(last, list) else []
        if cacheable:
            cacheable[-1]["cache_control"] = EPHEMERAL
        return messages

    def _record(self, response: Any, seconds: float, total: Usage, records: list[dict[str, Any]]) -> Usage:
        u = response.usage
        call = Usage(input_tokens=u.input_tokens or 0, output_tokens=u.output_tokens or 0,
                     cache_read_tokens=getattr(u, "cache_read_input_tokens", None) or 0,
                     cache_write_tokens=getattr(u, "cache_creation_input_tokens", None) or 0)
        call.cost_usd = self.settings.price.cost(call)
        total.add(call)
        self.calls += 1
        records.append({
            "call": self.calls, "model": getattr(response, "model", self.settings.model),
            "stop_reason": response.stop_reason, "input_tokens": call.input_tokens,
            "output_tokens": call.output_tokens, "cache_read_tokens": call.cache_read_tokens,
            "cache_write_tokens": call.cache_write_tokens, "cost_usd": round(call.cost_usd, 6),
            "seconds": round(seconds, 3), "request_id": getattr(response, "_request_id", None),
        })
        return call

    # -- context trimming -------------------------------------------------------------------

    def trim(self, keep_recent: int) -> int:
        shortened = trim_messages(self.messages, keep_recent)
        self.trimmed += shortened
        self.context_tokens = 0  # unknown until the next call reports it
        return shortened

    def trimmed_everything(self) -> bool:
        return trim_messages(copy.deepcopy(self.messages), keep_recent=0) == 0

    # -- persistence ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {"messages": self.messages, "calls": self.calls, "context_tokens": self.context_tokens,
                "trimmed": self.trimmed}

    def restore(self, state: dict[str, Any]) -> None:
        self.messages = json.loads(json.dumps(state.get("messages", [])))
        self.calls = int(state.get("calls", 0))
        self.context_tokens = int(state.get("context_tokens", 0))
        self.trimmed = int(state.get("trimmed", 0))


def trim_messages(messages: list[dict[str, Any]], keep_recent: int) -> int:
    """Shorten old tool results and old tool inputs (kernel sources) to their first line; the
    newest `keep_recent` of each stay whole. Returns how many blocks were shortened."""
    results = [b for m in messages if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    uses = [b for m in messages for b in _tool_uses(m)]
    old_results = results[:-keep_recent] if keep_recent else results
    old_uses = uses[:-keep_recent] if keep_recent else uses
    shortened = 0
    for block in old_results:
        content = block.get("content")
        if isinstance(content, str) and len(content) > TRIMMED_KEEP_CHARS and not content.startswith("[trimmed"):
            first = content.splitlines()[0][:TRIMMED_KEEP_CHARS]
            block["content"] = f"[trimmed to save context; it began: {first}]"
            shortened += 1
    for block in old_uses:
        for key, value in list(block["input"].items()):
            if isinstance(value, str) and len(value) > TRIMMED_KEEP_CHARS:
                block["input"][key] = f"[trimmed: {value.count(chr(10)) + 1} lines]"
                shortened += 1
    return shortened


def _message(exc: anthropic.APIError) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(exc.message if hasattr(exc, "message") else exc)
