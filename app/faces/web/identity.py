"""Who is acting: a person sets a name once (the `socratic_name` cookie, set by POST /name
from the form in every page's header); messages, pauses, curation and forks record it instead
of "person". A name given in an API body (`author`) wins over the cookie."""

from __future__ import annotations

import re

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse
from starlette.requests import HTTPConnection

NAME_COOKIE = "socratic_name"
DEFAULT_AUTHOR = "person"
MAX_NAME = 80
RESERVED = ("bank", "agent")  # the question bank's and agents' own authorship

router = APIRouter(include_in_schema=False)


def clean_name(raw: str | None) -> str:
    """A name as stored: printable, spaces collapsed, at most MAX_NAME characters; '' if none."""
    text = re.sub(r"\s+", " ", "".join(ch for ch in (raw or "") if ch.isprintable())).strip()[:MAX_NAME]
    return "" if text.lower() in RESERVED else text


def person_name(conn: HTTPConnection) -> str:
    """The name this browser set, or '' when none."""
    return clean_name(conn.cookies.get(NAME_COOKIE))


def author_of(conn: HTTPConnection, given: str | None = None) -> str:
    """The author to record: the API body's, else the cookie's, else "person"."""
    for candidate in (given, person_name(conn)):
        name = clean_name(candidate)
        if name and name != DEFAULT_AUTHOR:
            return name
    return DEFAULT_AUTHOR


@router.post("/name")
async def set_name(request: Request, name: str = Form(""), next: str = Form("/")) -> RedirectResponse:
    back = next if next.startswith("/") and not next.startswith("//") else "/"
    response = RedirectResponse(back, status_code=303)
    value = clean_name(name)
    if value:
        response.set_cookie(NAME_COOKIE, value, max_age=365 * 24 * 3600, httponly=True, samesite="strict")
    else:
        response.delete_cookie(NAME_COOKIE)
    return response
