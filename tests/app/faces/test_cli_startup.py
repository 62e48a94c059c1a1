"""`socratic` starts fast for commands that need no GPU stack: `--help` and `bank export`
import neither torch nor fastapi (lazy imports), measured in a fresh interpreter. The limit is
on the process's own CPU time, 1.5 s for what takes about 0.9 s here (sqlalchemy and sqlmodel are
most of it; importing torch alone costs more than the limit): other work on a busy CI machine, such
as the second test worker, stretches the wall clock and a little of the CPU time, not the work the
command does (wall time stays under 5 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import PROJECT_ROOT

ROOT = PROJECT_ROOT
LIMIT_S = 1.5
WALL_LIMIT_S = 5.0

MEASURE = """
import contextlib, io, json, sys, time
start, cpu = time.perf_counter(), time.process_time()
from app.faces.commands.cli import main
code = None
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:  # --help exits 0
        code = exc.code
print(json.dumps({"s": time.perf_counter() - start, "cpu": time.process_time() - cpu, "code": code,
                  "heavy": sorted(m for m in ("torch", "fastapi", "uvicorn") if m in sys.modules)}))
"""


def run_command(*argv: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", MEASURE, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.serial
def test_help_starts_without_torch_or_fastapi() -> None:
    result = run_command("--help")
    assert result["code"] == 0
    assert result["heavy"] == []
    assert float(result["cpu"]) < LIMIT_S and float(result["s"]) < WALL_LIMIT_S, result  # type: ignore[arg-type]


@pytest.mark.serial  # a bound on CPU time: measured with no other test worker beside it
def test_bank_export_starts_without_torch_or_fastapi(tmp_path: Path) -> None:
    argv = ("bank", "export", "--data-dir", str(tmp_path), "--out", str(tmp_path / "bank.yaml"))
    first = run_command(*argv)  # makes the database: migrations and the starter bank, once
    assert first["code"] == 0 and first["heavy"] == [] and float(first["s"]) < WALL_LIMIT_S, first  # type: ignore[arg-type]
    result = run_command(*argv)
    assert result["code"] == 0
    assert result["heavy"] == []
    assert float(result["cpu"]) < LIMIT_S and float(result["s"]) < WALL_LIMIT_S, result  # type: ignore[arg-type]
    assert (tmp_path / "bank.yaml").read_text().strip()


def test_a_file_that_is_no_database_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_text("these are notes, not SQLite\n" * 50)
    for argv in (["trace", "audit", "1"], ["bank", "export"]):
        done = subprocess.run([sys.executable, "-m", "app", *argv, "--db", str(not_a_db)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert lines == [f"socratic {argv[0]}: the database cannot be used: file is not a database"], lines


def test_the_evaluation_path_of_the_cli_imports_no_torch() -> None:
    """`socratic eval` compiles before anything else: the modules it runs up to the worker's job
    (the evaluation, the executor, the compile, the job, the GPU query through the driver) must
    not import torch, or nvcc would start only once the import ends (seconds)."""
    code = ("import sys\n"
            "import harness.cli, harness.evaluate, harness.executor, harness.job, harness.problem_registry\n"
            "harness.evaluate.detect_arch(); harness.evaluate.gpu_available()\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_torch_free_baseline_names_the_problem_s_own() -> None:
    from harness.attention.forward import AttentionForward
    from harness.problem_registry import BASELINES, baseline_source

    assert baseline_source("attention-forward") == AttentionForward.baseline_source == BASELINES["attention-forward"]
    assert baseline_source("attention-forward").is_file()
