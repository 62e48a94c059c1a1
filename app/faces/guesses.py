"""The count of wrong credentials per client address that every door shares: the web's
Bearer header, sign-in cookie, websocket handshake and /login (app/faces/web/security.py),
and /mcp's session tokens (app/faces/mcp.py). Below both, so that either can count."""

from __future__ import annotations

import time
from collections import deque

from starlette.responses import JSONResponse

TOO_MANY = "too many wrong tokens from this address; wait a minute"


class Guesses:
    """One count of wrong credentials per client address, whatever the door: at most
    `per_minute` in any 60 seconds, then the address is refused (429, or close 1008) until its
    oldest failure is a minute old. Other addresses are not affected. Revoked cookies are kept
    here too (until they would have expired)."""

    def __init__(self, per_minute: int, cookie_max_age_s: float = 0) -> None:
        self.per_minute = per_minute
        self.failures: dict[str, deque[float]] = {}
        self.cookie_max_age_s = cookie_max_age_s
        self.revoked: dict[str, float] = {}

    def _recent(self, client: str) -> deque[float]:
        now = time.monotonic()
        times = self.failures.get(client)
        if times is None:
            return deque()
        while times and now - times[0] > 60:
            times.popleft()
        if not times:
            del self.failures[client]
        return times

    def blocked(self, client: str) -> bool:
        return len(self._recent(client)) >= self.per_minute

    def failed(self, client: str) -> None:
        self._recent(client)
        self.failures.setdefault(client, deque()).append(time.monotonic())
        if len(self.failures) > 10_000:  # many addresses: forget the oldest
            self.failures.pop(next(iter(self.failures)))

    def revoke(self, cookie: str) -> None:
        now = time.time()
        self.revoked = {c: t for c, t in self.revoked.items() if now - t <= self.cookie_max_age_s}
        self.revoked[cookie] = now

    def is_revoked(self, cookie: str) -> bool:
        return cookie in self.revoked


def too_many() -> JSONResponse:
    return JSONResponse({"detail": TOO_MANY}, status_code=429, headers={"Retry-After": "60"})
