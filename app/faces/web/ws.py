"""The session websocket: `/ws/sessions/{id}?after=SEQ` pushes htmx fragments (the trace's
new events, then the state panels) and accepts steering messages.

Replay: the client names the last event it has shown (`after`); the server subscribes to
live events first, then sends every stored event after `after`, then live ones, skipping
any it has already sent. So a client that reconnects after a drop receives every event it
missed, in order, and none twice. Live notes (evaluation progress) are not stored and are
not replayed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from app.domain.lifecycle import InvalidTransition
from app.domain.schemas import InterventionCreate
from app.domain.sessions import Conflict, Invalid, NotFound, get_session, pause, resume, send_message, stop
from app.faces.guesses import TOO_MANY
from app.faces.web import render
from app.faces.web.deps import Steering, get_ctx, get_runners
from app.faces.web.identity import author_of
from app.faces.web.security import BLOCKED, GOOD, OPEN, client_address, credential, same_origin
from app.services.context import ServerContext
from app.store.events import LiveNote, Unit, events_after
from app.store.input_limits import INT64_MAX, parse_json
from app.store.models import Event

router = APIRouter()
REPLAY_BATCH = 200
MAX_STEERING_BYTES = 64_000  # one steering message (its text is at most 10 000 characters)


@router.websocket("/ws/sessions/{session_id}")
async def session_socket(websocket: WebSocket, session_id: int) -> None:
    ctx = get_ctx(websocket)
    verdict = credential(ctx.settings, websocket.app.state.guesses, websocket)
    if verdict == BLOCKED:
        await websocket.accept()  # accepted to say why: a refused handshake carries no reason to the page
        await websocket.close(code=1008, reason=TOO_MANY)
        return
    if verdict not in (OPEN, GOOD) or not same_origin(websocket):
        await websocket.close(code=1008)
        return
    try:
        after = min(max(0, int(websocket.query_params.get("after", "0"))), INT64_MAX)
    except ValueError:
        after = 0
    with ctx.database.session() as db:
        try:
            get_session(db, session_id)
        except NotFound:
            await websocket.close(code=1008)
            return
    await websocket.accept()
    client = client_address(websocket)
    open_now: dict[str, int] = websocket.app.state.websockets
    if open_now.get(client, 0) >= ctx.settings.websockets_per_client:
        await websocket.close(code=1013, reason=f"{ctx.settings.websockets_per_client} websockets from this address "
                                                "are open (SOCRATIC_WEBSOCKETS_PER_CLIENT); close one")
        return
    open_now[client] = open_now.get(client, 0) + 1
    try:
        await _serve(websocket, ctx, session_id, after)
    finally:
        open_now[client] -= 1
        if not open_now[client]:
            del open_now[client]


async def _serve(websocket: WebSocket, ctx: ServerContext, session_id: int, after: int) -> None:
    queue = ctx.hub.subscribe(session_id)  # before the backlog: nothing falls in between
    reader = asyncio.create_task(_read_steering(websocket, Steering(ctx, get_runners(websocket)), session_id))
    try:
        last_sent = await _replay(websocket, ctx, session_id, after)
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done:
                getter.cancel()
                break
            items = [getter.result()]
            while not queue.empty():
                items.append(queue.get_nowait())
            last_sent = await _send_items(websocket, ctx, session_id, items, last_sent)
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        ctx.hub.unsubscribe(session_id, queue)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader


async def _replay(websocket: WebSocket, ctx: ServerContext, session_id: int, after: int) -> int:
    last_sent = after
    while True:
        with ctx.database.session() as db:
            batch = list(events_after(db, session_id, last_sent, REPLAY_BATCH))
        if not batch:
            break
        last_sent = await _send_events(websocket, ctx, session_id, batch, last_sent)
    # The panels once, even with nothing to replay: they may have changed while away.
    with ctx.database.session() as db:
        await websocket.send_text(render.panels(db, session_id))
    return last_sent


async def _send_items(websocket: WebSocket, ctx: ServerContext, session_id: int,
                      items: list[Event | LiveNote], last_sent: int) -> int:
    events = [i for i in items if isinstance(i, Event)]
    notes = [i for i in items if isinstance(i, LiveNote)]
    if events:
        last_sent = await _send_events(websocket, ctx, session_id, events, last_sent)
    if notes:
        await websocket.send_text(render.note_fragment(notes[-1]))
    return last_sent


async def _send_events(websocket: WebSocket, ctx: ServerContext, session_id: int, events: list[Event],
                       last_sent: int) -> int:
    fresh = sorted((e for e in events if e.seq > last_sent), key=lambda e: e.seq)
    if not fresh:
        return last_sent
    if fresh[0].seq != last_sent + 1:
        # A gap (events committed by another transaction not yet seen): read them from the log.
        with ctx.database.session() as db:
            fresh = list(events_after(db, session_id, last_sent, fresh[-1].seq - last_sent))
    last_sent = fresh[-1].seq
    with ctx.database.session() as db:
        html = render.events_fragment(fresh, last_sent) + render.panels(db, session_id)
    await websocket.send_text(html)
    return last_sent


async def _read_steering(websocket: WebSocket, steer: Steering, session_id: int) -> None:
    """Steering messages from the page: {"action": "send"|"pause"|"resume"|"stop", ...}."""
    while True:
        raw = await websocket.receive_text()
        try:
            message = parse_json(raw, "steering message", max_bytes=MAX_STEERING_BYTES)
            if not isinstance(message, dict):
                raise ValueError("a steering message is a JSON object")
            reply = handle_steering(steer, session_id, message, author_of(websocket))
        except (ValidationError, Invalid, Conflict, InvalidTransition, NotFound, ValueError) as exc:
            reply = render.render("fragments/composer_status.html", error=True, message=_message(exc))
        await websocket.send_text(reply)


def handle_steering(steer: Steering, session_id: int, message: dict[str, Any], author: str = "person") -> str:
    """`author`: the name this browser set (app/faces/web/identity.py), else "person"."""
    action = message.get("action", "send")
    if action == "send":
        msg = InterventionCreate(
            text=str(message.get("text", "")), kind=message.get("kind", "question"),
            mode=message.get("mode", "steer"), author=author, resume=bool(message.get("resume")),
        )
        steer.act(session_id, lambda u: send_message(u, session_id, msg))
        return render.render("fragments/composer.html", oob=True, error=False,
                             message=f"{msg.kind.capitalize()} sent ({msg.mode}).")
    actions: dict[str, Callable[[Unit], object]] = {
        "pause": lambda u: pause(u, session_id, author),
        "resume": lambda u: resume(u, session_id, author),
        "stop": lambda u: stop(u, session_id, author),
    }
    if action not in actions:
        raise ValueError(f"unknown action {action!r}")
    steer.act(session_id, actions[action])
    return render.render("fragments/composer_status.html", error=False, message=f"{action} done.")


def _message(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'message'}: {e['msg']}" for e in exc.errors())
    return str(exc)
