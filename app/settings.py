"""The server's one settings object: environment variables prefixed SOCRATIC_, overridden by
`socratic serve` flags. It refuses unsafe combinations (a public bind without a token)."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import socket
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The checkout the server runs from: templates, static files, kernels (app/ is one level down).
PROJECT_ROOT = Path(__file__).resolve().parents[1]
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Keys(BaseSettings):
    """Secrets that keep their usual environment names (no SOCRATIC_ prefix)."""

    model_config = SettingsConfigDict(extra="ignore")

    anthropic_api_key: SecretStr | None = Field(default=None, validation_alias="ANTHROPIC_API_KEY")


def anthropic_api_key() -> str | None:
    """ANTHROPIC_API_KEY as the environment holds it now (the one place it is read), or None."""
    key = _Keys().anthropic_api_key
    value = key.get_secret_value().strip() if key is not None else ""
    return value or None


class Settings(BaseSettings):
    """Every knob of the server. docs/server.md lists them; tests/app/test_docs_and_migrations.py
    checks that the list is complete."""

    model_config = SettingsConfigDict(env_prefix="SOCRATIC_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="address to bind; anything but loopback needs a token")
    port: int = Field(default=8000, ge=0, le=65535, description="TCP port (0 picks a free one)")
    data_dir: Path = Field(default=Path("data"), description="where the SQLite file and candidate sources live")
    db_url: str | None = Field(
        default=None, description="any SQLAlchemy URL; default sqlite:///<data_dir>/socratic.db"
    )
    token: SecretStr | None = Field(
        default=None, description="shared secret for pages, API and websockets; required off loopback"
    )
    token_file: Path | None = Field(
        default=None, description="a file holding the token (its first line): keeps it out of the environment "
                                  "and off the command line, where `ps` shows it to every user of the machine"
    )
    allow_python_candidates: bool = Field(
        default=False,
        description="accept 'python-cpu' candidates (module:function kernels run on the CPU by "
                    "the harness's worker processes); meant for tests and demos without a GPU",
    )
    gpu_poll_s: float = Field(
        default=30.0, gt=0, description="how often a session waiting for a GPU checks again"
    )
    timing_budget_ms: float = Field(
        default=20.0, gt=0, description="device time per implementation per scenario when timing"
    )
    scenario_timeout_s: float = Field(default=120.0, gt=0, description="a scenario slower than this is a hang")
    trials: int = Field(default=2, ge=2, description="correctness trials per scenario (at least two)")
    peers: tuple[str, ...] = Field(
        default=("cudnn", "flash", "fa3"),
        description="peers timed beside each candidate on GPU: torch SDPA backends, FA3 where fa3-fwd loads"
    )
    peer_cache_hours: float = Field(
        default=24.0, ge=0,
        description="reuse a peer's time on a scenario measured by an earlier evaluation on this GPU for this "
                    "long (harness/peer_cache.py): saves cuDNN's plan build per shape in every evaluation; "
                    "0 times every peer side by side each time",
    )
    cluster: str | None = Field(
        default=None,
        description="address of a Dask cluster of GPU workers (tcp://host:8786, docs/harness.md): evaluations are "
                    "sharded over its GPUs, one candidate per GPU at a time; unset: this machine's GPU",
    )
    allowed_hosts: tuple[str, ...] = Field(
        default=(),
        description="host names (the Host header without port) the server answers to besides loopback and "
                    "the bound address, as a JSON list, e.g. [\"gpu1.example.org\"]; \"*\" answers any Host "
                    "(then only the token protects it). Other Hosts get 421 (DNS rebinding)",
    )
    request_max_bytes: int = Field(
        default=2 * 1024 * 1024, ge=1024, le=1024**3,
        description="largest request body (413 beyond); trace uploads have their own limit",
    )
    trace_max_bytes: int = Field(
        # A 60-evaluation session on 61 scenarios is 13 MB of JSON (examples/agent-v2/all182-*).
        default=32 * 1024 * 1024, ge=1024, le=1024**3,
        description="largest trace file, decompressed, that `trace import`, `trace kernel` and the import page "
                    "accept (413 beyond)",
    )
    login_attempts_per_minute: int = Field(
        default=10, ge=1, le=10_000,
        description="wrong credentials a client address may present a minute, whatever the door (the Bearer "
                    "header, the cookie, a websocket, /login, /mcp); then 429 or close 1008 for that address",
    )
    forwarded_allow_ips: tuple[str, ...] = Field(
        default=(),
        description="addresses of reverse proxies whose X-Forwarded-For and X-Forwarded-Proto are believed, "
                    "as a JSON list ([\"127.0.0.1\"]); empty: every client is its connection's address",
    )
    cookie_max_age_s: float = Field(
        default=7 * 24 * 3600.0, ge=60, le=365 * 24 * 3600.0,
        description="how long a sign-in cookie is valid; one past half its life is reissued",
    )
    websockets_per_client: int = Field(
        default=16, ge=1, le=10_000, description="open websockets per client address; more are closed (1013)"
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="a request body must arrive within this many seconds (408 then)"
    )
    mcp_sessions_max: int = Field(
        default=64, ge=1, le=100_000, description="open MCP sessions (outside agents connected); more get 429"
    )
    log_level: str = Field(default="info", description="uvicorn log level")
    bank_semantic_search: bool = Field(
        default=True, description="question bank search by meaning too, when the packaged embedding model "
                                  "is installed (the `semantic` extra); keywords alone otherwise"
    )
    lessons_distill: bool = Field(
        default=True, description="distil lessons in the background after each judged candidate and at the end "
                                  "of each session (lessons/); off: only `socratic lessons distill` adds them"
    )
    lessons_prompt_tokens: int = Field(
        default=600, ge=0, le=8000, description="the most tokens of lessons a model's prompt carries (0: none)"
    )

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        if self.token_file is not None and not self.token_value:
            try:
                lines = self.token_file.read_text().splitlines()
            except OSError as exc:
                raise ValueError(f"the token file {self.token_file} cannot be read: {exc.strerror}") from exc
            if not lines or not lines[0].strip():
                raise ValueError(f"the token file {self.token_file} is empty")
            self.token = SecretStr(lines[0].strip())
        if not is_loopback(self.host) and not self.token_value:
            raise ValueError(
                f"binding to {self.host} exposes the server beyond this machine; set SOCRATIC_TOKEN "
                "(or SOCRATIC_TOKEN_FILE / --token-file) to a secret, or bind to 127.0.0.1"
            )
        return self

    @cached_property
    def allowed_host_names(self) -> frozenset[str]:
        """Host names requests may carry (loopback addresses are always accepted too)."""
        names = set(LOOPBACK_NAMES) | {h.strip().lower() for h in self.allowed_hosts if h.strip()}
        host = self.host.strip("[]").lower()
        if host in ("0.0.0.0", "::", ""):  # a wildcard bind answers on every address of the machine
            names |= _machine_names()
        else:
            names.add(host)
        return frozenset(names)

    @property
    def default_agent(self) -> str:
        """What a new session gets when it names no agent (nor a script): claude with an API key,
        the offline agent without."""
        return "claude" if anthropic_api_key() else "offline"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        """The environment (SOCRATIC_*) first, command-line flags over it."""
        overrides: dict[str, Any] = {}
        for flag, key in (("host", "host"), ("port", "port"), ("db", "db_url"), ("data_dir", "data_dir"),
                          ("token", "token"), ("token_file", "token_file"), ("cluster", "cluster"),
                          ("forwarded_allow_ips", "forwarded_allow_ips")):
            value = getattr(args, flag, None)
            if value is not None:
                overrides[key] = value
        if getattr(args, "allow_python_candidates", False):
            overrides["allow_python_candidates"] = True
        if overrides.get("db_url") and "://" not in overrides["db_url"]:
            overrides["db_url"] = f"sqlite:///{overrides['db_url']}"  # a plain path means a SQLite file
        return cls(**overrides)

    @property
    def token_value(self) -> str | None:
        value = self.token.get_secret_value() if self.token else None
        return value or None

    @property
    def database_url(self) -> str:
        if self.db_url:
            return self.db_url
        return f"sqlite:///{(self.data_dir / 'socratic.db').as_posix()}"

    @property
    def peer_cache_dir(self) -> Path | None:
        return self.data_dir / "cache" / "peers" if self.peer_cache_hours > 0 else None

    @property
    def sources_dir(self) -> Path:
        """Candidate sources are written here before the harness compiles them."""
        return self.data_dir / "candidates"


def _machine_names() -> set[str]:
    """This machine's name, full name and addresses: what clients of a wildcard bind use."""
    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    with contextlib.suppress(OSError):
        names |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    return names
