"""The optional pass that writes a lesson in words with a model (Claude through the anthropic SDK):
one paragraph from the structured record, no fact the record lacks. Offline the distiller's
template stands (lessons/distill.py: describe); a model's paragraph is kept by later merges
(author "model") until a person edits it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PROMPT = (
    "Write one paragraph (at most 90 words) that states this measured lesson for a GPU kernel engineer: "
    "where it was seen (architecture, problem, the parent's engine and what its profile said), the action, "
    "its effect with the numbers given (overall and where it held or hurt), how often it was seen and how "
    "sure it is. Use only facts in the record; no advice beyond it; plain text, no lists.\n\nRecord:\n"
)
MAX_TOKENS = 300


@dataclass(frozen=True)
class Paragraph:
    text: str
    input_tokens: int
    output_tokens: int


def record_for_words(lesson: dict[str, Any]) -> dict[str, Any]:
    """What the model reads: the structured lesson without evidence ids or the full setting."""
    situation = {k: v for k, v in (lesson.get("situation") or {}).items() if k != "setting"}
    return {"situation": situation, "action": lesson.get("action"), "effect": lesson.get("effect"),
            "count": lesson.get("count"), "helped": lesson.get("helped"), "confidence": lesson.get("confidence"),
            "scope": lesson.get("scope")}


async def model_paragraph(lesson: dict[str, Any], client: Any, model: str) -> Paragraph:
    """One paragraph from `client` (an anthropic.AsyncAnthropic); raises ValueError on an empty answer."""
    reply = await client.messages.create(
        model=model, max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": PROMPT + json.dumps(record_for_words(lesson), indent=1)}],
    )
    words = " ".join(b.text for b in reply.content if getattr(b, "type", "") == "text").strip()
    if not words:
        raise ValueError("the model answered without words")
    return Paragraph(words, int(reply.usage.input_tokens), int(reply.usage.output_tokens))
