"""Shared fixtures. GPU tests carry the `gpu` marker and skip cleanly without a CUDA GPU."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


HAS_GPU = _has_gpu()
HAS_NVCC = shutil.which("nvcc") is not None


# PostgreSQL, the team database: scripts/test.sh starts a real server (scripts/test_postgres.sh)
# and exports its URL here; the database and server tests then run on SQLite and on it.
POSTGRES_URL = os.environ.get("SOCRATIC_TEST_POSTGRES", "")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Test modules whose every test runs once per database (SOCRATIC_DB_URL is set for them);
# test_server_restart checks the SQLite file itself, test_server_docs has no database.
BOTH_DATABASES = ("test_server_", "test_database")
SQLITE_ONLY = ("test_server_restart", "test_server_docs")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if ("database_backend" in metafunc.fixturenames and module.startswith(BOTH_DATABASES)
            and not module.startswith(SQLITE_ONLY)):
        metafunc.parametrize("database_backend", ["sqlite", "postgresql"], indirect=True)


def postgres_admin_url() -> str:
    """The test server's URL; a missing server skips the test (fails it in CI)."""
    if not POSTGRES_URL:
        why = ("PostgreSQL is not available: scripts/test.sh starts one (scripts/test_postgres.sh), "
               "or set SOCRATIC_TEST_POSTGRES to a server's URL")
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    return POSTGRES_URL


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty database on the test server (dropped afterwards); yields its URL."""
    admin_url = postgres_admin_url()  # skips (fails in CI) before the driver is needed
    import psycopg
    from sqlalchemy.engine import make_url

    admin = make_url(admin_url)
    name = f"socratic_test_{uuid.uuid4().hex[:16]}"
    conninfo = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(autouse=True)
def database_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """"sqlite" (the default everywhere) or, for the modules above, "postgresql" too: then the
    server the test starts finds a fresh PostgreSQL database in SOCRATIC_DB_URL."""
    backend = getattr(request, "param", "sqlite")
    if backend != "postgresql":
        yield backend
        return
    with fresh_postgres_database() as url:
        monkeypatch.setenv("SOCRATIC_DB_URL", url)
        yield backend


# The files that take longest on the CI machine (2 cores, two xdist workers), longest first, with
# their seconds in the two-worker run of 2026-12-06 (docs/lab/2026-12-06-ci-time.md). They run
# first, then every other file, most tests first: with `--dist loadfile` a worker takes the next
# file when it is nearly done, so one of these left to the end kept the other core idle while it
# finished. scripts/test.sh passes --no-loadscope-reorder so that xdist keeps this order.
LONGEST_FILES = (
    "tests/kernels/test_family_decode.py",  # 408 s: nvcc compiles of the leader's variants
    "tests/kernels/test_family_gallery.py",  # 317 s: a sample of the space compiled
    "tests/app/engine/agents/test_mcp_agent.py",  # 30 s (322 s where its client waited past the timeout)
    "tests/harness/test_executor.py",  # 201 s
    "tests/harness/test_compile.py",  # 129 s
    "tests/harness/test_cluster.py",  # 118 s
    "tests/kernels/test_family_scheduling.py",  # 77 s
    "tests/app/faces/test_weak_spots.py",  # 63 s
    "tests/app/faces/test_pages_browser.py",  # 61 s
    "tests/question_bank/test_bank_server.py",  # 57 s
    "tests/app/domain/campaigns/test_experiment_script.py",  # 53 s
)


def _file_order(items: list[pytest.Item]) -> dict[str, int]:
    """Each file's place: LONGEST_FILES in their order, then the rest by their count of tests
    (more first, as xdist's own reordering does), then by where they were collected."""
    counts: dict[str, int] = {}
    for item in items:
        name = item.nodeid.split("::", 1)[0]
        counts[name] = counts.get(name, 0) + 1
    first = {name: rank for rank, name in enumerate(LONGEST_FILES)}
    ordered = sorted(counts, key=lambda name: (first.get(name, len(first)), -counts[name]))
    return {name: place for place, name in enumerate(ordered)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
    place = _file_order(items)
    items.sort(key=lambda item: place[item.nodeid.split("::", 1)[0]])  # stable: a file keeps its order


def pytest_deselected(items: list[pytest.Item]) -> None:
    """The `serial` tests that `-m "not serial"` left out, written to the file named by
    SOCRATIC_SERIAL_TESTS (one node id a line): scripts/test.sh then runs exactly those, alone,
    without collecting the whole suite a second time (14 s of the CI machine's time)."""
    path = os.environ.get("SOCRATIC_SERIAL_TESTS")
    serial = [item.nodeid for item in items if item.get_closest_marker("serial") is not None]
    if not path or not serial:
        return
    # Each xdist worker deselects the same tests: each writes the whole list, and the last rename wins.
    part = Path(f"{path}.{os.getpid()}")
    part.write_text("".join(f"{nodeid}\n" for nodeid in serial))
    os.replace(part, path)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test session gets its own compile cache unless one is set explicitly."""
    if "SOCRATIC_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    yield
