"""A stand-in for the Anthropic Messages API behind the real SDK: an httpx2 MockTransport that
answers POST /v1/messages with queued bodies in the API's JSON schema and records every
request body, so tests drive `anthropic.AsyncAnthropic` itself (retries, parsing, errors)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import httpx2

Reply = dict[str, Any] | httpx2.Response | Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def message(*blocks: dict[str, Any], stop_reason: str, input_tokens: int = 400, output_tokens: int = 60,
            cache_write: int = 0, cache_read: int = 0, model: str = "claude-sonnet-5-5") -> dict[str, Any]:
    """A Messages API response body."""
    message.count = getattr(message, "count", 0) + 1  # type: ignore[attr-defined]
    return {
        "id": f"msg_{message.count:04d}",  # type: ignore[attr-defined]
        "type": "message", "role": "assistant", "model": model, "content": list(blocks),
        "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_creation_input_tokens": cache_write, "cache_read_input_tokens": cache_read},
    }


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def tool_use(use_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": args}


def error(status: int, kind: str, words: str, retry_after_ms: int = 1) -> httpx2.Response:
    return httpx2.Response(status, json={"type": "error", "error": {"type": kind, "message": words}},
                           headers={"retry-after-ms": str(retry_after_ms)})


class FakeMessagesAPI:
    def __init__(self, replies: list[Reply] | None = None) -> None:
        self.replies: list[Reply] = list(replies or [])
        self.requests: list[dict[str, Any]] = []

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        assert request.method == "POST" and request.url.path == "/v1/messages", request.url
        body = json.loads(request.content)
        self.requests.append(body)
        if not self.replies:
            raise AssertionError(f"the fake API has no reply left for request {len(self.requests)}")
        reply = self.replies.pop(0)
        if isinstance(reply, httpx2.Response):
            return reply
        if callable(reply):
            reply = await reply(body)
        return httpx2.Response(200, json=reply, headers={"request-id": f"req_{len(self.requests)}"})

    def client(self, max_retries: int = 2) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key="sk-test", max_retries=max_retries,
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle)),
        )


def user_blocks(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of the request's last (user) message."""
    last = request["messages"][-1]
    assert last["role"] == "user"
    return list(last["content"])


def serve_claude_from(api: FakeMessagesAPI, monkeypatch: Any) -> None:
    """Make the registry's `claude` agent talk to `api` (for sessions run by a real server)."""
    from app.engine.agents import registry
    from app.engine.agents.claude import ClaudeAgent

    info = registry.agent_info("claude")
    monkeypatch.setitem(registry._AGENTS, "claude", registry.AgentInfo(
        "claude", info.description, lambda task, config: ClaudeAgent(task, config, client=api.client()),
        info.validate))
