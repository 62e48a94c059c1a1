"""The cache folder's bytecode: Python's compiled modules kept there where the interpreter
would compile every module from source in every process (the GPU machine's image: torch's
~2,100 modules, 5-8 s of every `import torch`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# A fresh interpreter (its own sys.pycache_prefix and environment): keep_bytecode with a
# stand-in probe package, then an import of a module of it, then a child interpreter that
# inherits the environment and imports another one.
SCRIPT = """
import json, os, subprocess, sys
from harness.caches import keep_bytecode
kept = keep_bytecode("probe_pkg")
import probe_pkg.first
child = subprocess.run([sys.executable, "-c", "import probe_pkg.second"], capture_output=True, text=True)
print(json.dumps({"kept": str(kept) if kept else None, "prefix": sys.pycache_prefix,
                  "env_prefix": os.environ.get("PYTHONPYCACHEPREFIX"),
                  "dont_write": os.environ.get("PYTHONDONTWRITEBYTECODE"), "child": child.returncode}))
"""


def run(tmp_path: Path, *, bytecode_beside: bool = False, **env: str) -> dict[str, object]:
    pkg = tmp_path / "site" / "probe_pkg"
    pkg.mkdir(parents=True, exist_ok=True)
    for name in ("__init__", "first", "second"):
        (pkg / f"{name}.py").write_text("VALUE = 1\n")
    if bytecode_beside:
        (pkg / "__pycache__").mkdir(exist_ok=True)
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "SOCRATIC_BYTECODE_CACHE")}
    full.update({"PYTHONPATH": f"{ROOT}:{tmp_path / 'site'}", "SOCRATIC_CACHE_DIR": str(tmp_path / "cache"),
                 "PYTHONDONTWRITEBYTECODE": "1", **env})
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=full, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def compiled(tmp_path: Path) -> set[str]:
    return {p.name.split(".")[0] for p in (tmp_path / "cache" / "pycache").rglob("*.pyc")
            if "probe_pkg" in str(p)}


def test_modules_are_compiled_once_into_the_cache_folder_and_children_use_it(tmp_path: Path) -> None:
    got = run(tmp_path)
    target = str(tmp_path / "cache" / "pycache")
    assert got["kept"] == got["prefix"] == got["env_prefix"] == target
    assert got["dont_write"] is None and got["child"] == 0
    # this process's import and the child's both left their bytecode there, none beside the sources
    assert compiled(tmp_path) == {"__init__", "first", "second"}
    assert not list((tmp_path / "site").rglob("*.pyc"))


@pytest.mark.parametrize("case", ["turned off", "turned off in words", "bytecode beside the sources",
                                  "a prefix already chosen"])
def test_nothing_changes_where_python_already_keeps_bytecode_or_it_is_turned_off(tmp_path: Path, case: str) -> None:
    env = {"turned off": {"SOCRATIC_BYTECODE_CACHE": "0"}, "turned off in words": {"SOCRATIC_BYTECODE_CACHE": " Off"},
           "bytecode beside the sources": {},
           "a prefix already chosen": {"PYTHONPYCACHEPREFIX": str(tmp_path / "theirs")}}[case]
    got = run(tmp_path, bytecode_beside=case == "bytecode beside the sources", **env)
    assert got["kept"] is None
    assert got["dont_write"] == "1"  # the environment the caller gave is left as it was
    assert not compiled(tmp_path)
