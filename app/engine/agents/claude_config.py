"""The Claude agent's options and prices, without the anthropic SDK: the registry validates a
session's options and the pages show the default model without loading the SDK."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.engine.agents.base import AgentConfigError, Usage

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MAX_TOKENS = 16_384
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MAX_RETRIES = 4
DEFAULT_TRIM_AT_TOKENS = 150_000  # context size above which old tool results are trimmed
DEFAULT_KEEP_RECENT = 6  # tool results (and tool inputs) never trimmed, newest first
MAX_CONTINUATIONS = 4  # API calls one step may take beyond the first (pause_turn, cut replies)
MAX_RESULT_CHARS = 60_000  # a tool result longer than this is cut before it is sent
TRIMMED_KEEP_CHARS = 240
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_write: float  # 5-minute cache writes
    cache_read: float

    def cost(self, u: Usage) -> float:
        return (u.input_tokens * self.input + u.output_tokens * self.output
                + u.cache_write_tokens * self.cache_write + u.cache_read_tokens * self.cache_read) / 1e6


def _price(inp: float, out: float, read_factor: float = 0.1) -> Price:
    return Price(inp, out, inp * 1.25, inp * read_factor)


# Anthropic's list prices (platform.claude.com/docs/en/about-claude/pricing), longest prefix wins.
# Unknown models fall back to their family; `price` in the agent config overrides both.
PRICES: dict[str, Price] = {
    "claude-fable-5-1": _price(10.0, 50.0, 0.025),
    "claude-mythos-5-1": _price(10.0, 50.0, 0.025),
    "claude-fable-5": _price(10.0, 50.0),
    "claude-mythos-5": _price(10.0, 50.0),
    "claude-opus-5-5": _price(4.0, 20.0, 0.05),
    "claude-opus-5": _price(5.0, 25.0),
    "claude-opus-4-5": _price(5.0, 25.0),
    "claude-opus-4-6": _price(5.0, 25.0),
    "claude-opus-4-7": _price(5.0, 25.0),
    "claude-opus-4-8": _price(5.0, 25.0),
    "claude-opus-4": _price(15.0, 75.0),
    "claude-sonnet-5-5": _price(2.0, 10.0, 0.05),
    "claude-sonnet-5": _price(2.0, 10.0),
    "claude-sonnet": _price(3.0, 15.0),
    "claude-haiku-5-5": _price(0.10, 0.50),
    "claude-haiku": _price(1.0, 5.0),
    "claude": _price(3.0, 15.0),
}


def price_of(model: str, override: dict[str, Any] | None = None) -> Price:
    if override:
        try:
            return Price(float(override["input"]), float(override["output"]),
                         float(override.get("cache_write", float(override["input"]) * 1.25)),
                         float(override.get("cache_read", float(override["input"]) * 0.1)))
        except (KeyError, TypeError, ValueError) as exc:
            raise AgentConfigError("price needs numbers for input and output (USD per million tokens), "
                                   "optionally cache_write and cache_read") from exc
    key = max((k for k in PRICES if model.startswith(k)), key=len, default="claude")
    return PRICES[key]


@dataclass(frozen=True)
class ClaudeConfig:
    model: str = DEFAULT_MODEL
    max_tokens: int = DEFAULT_MAX_TOKENS
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    trim_at_tokens: int = DEFAULT_TRIM_AT_TOKENS
    keep_recent: int = DEFAULT_KEEP_RECENT
    price: Price = PRICES["claude-sonnet-5-5"]

    @classmethod
    def parse(cls, config: dict[str, Any]) -> ClaudeConfig:
        known = {"model", "max_tokens", "timeout_s", "max_retries", "trim_at_tokens", "keep_recent", "price"}
        unknown = set(config) - known
        if unknown:
            raise AgentConfigError(f"unknown claude option(s) {', '.join(sorted(unknown))}; "
                                   f"options: {', '.join(sorted(known))}")
        model = str(config.get("model") or DEFAULT_MODEL).strip()
        if not model:
            raise AgentConfigError("model must name a Claude model")

        def integer(name: str, default: int, low: int, high: int) -> int:
            try:
                value = int(config.get(name, default))
            except (TypeError, ValueError) as exc:
                raise AgentConfigError(f"{name} must be an integer") from exc
            if not low <= value <= high:
                raise AgentConfigError(f"{name} must be between {low} and {high}")
            return value

        try:
            timeout = float(config.get("timeout_s", DEFAULT_TIMEOUT_S))
        except (TypeError, ValueError) as exc:
            raise AgentConfigError("timeout_s must be a number of seconds") from exc
        if not 5 <= timeout <= 3600:
            raise AgentConfigError("timeout_s must be between 5 and 3600 seconds")
        return cls(
            model=model,
            max_tokens=integer("max_tokens", DEFAULT_MAX_TOKENS, 256, 128_000),
            timeout_s=timeout,
            max_retries=integer("max_retries", DEFAULT_MAX_RETRIES, 0, 10),
            trim_at_tokens=integer("trim_at_tokens", DEFAULT_TRIM_AT_TOKENS, 2_000, 2_000_000),
            keep_recent=integer("keep_recent", DEFAULT_KEEP_RECENT, 1, 100),
            price=price_of(model, config.get("price")),
        )


def validate_config(config: dict[str, Any]) -> None:
    ClaudeConfig.parse(config)
