"""The harness's commands (harness/cli.py): scenarios listing, eval without a GPU, check. The
`socratic` command registers the same ones; here they run as `python -m harness`, without the
web app."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HAS_GPU, ROOT


def socratic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT,
        timeout=120,
    )


def test_scenarios_json_lists_the_suite_with_required_fields() -> None:
    out = socratic("scenarios", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 182
    for key in ("name", "category", "hidden", "batch", "seqlen_q", "seqlen_k", "heads_q",
                "heads_kv", "head_dim", "causal", "flops"):
        assert key in rows[0]
    assert sum(r["hidden"] for r in rows) == 46


def test_scenarios_json_says_which_softmax_scale_each_trial_and_timed_call_uses() -> None:
    out = socratic("scenarios", "--json", "--filter", "gqa-llama3-8b-tp1-s4096-b2-causal")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["softmax_scale"] == pytest.approx(128 ** -0.5)
    assert row["trial_softmax_scales"] == [pytest.approx(128 ** -0.5), pytest.approx(1 / 12)]
    assert "1/sqrt(144), Gemma 2 27B" in row["timed_softmax_scales"]


def test_scenarios_table_filters_and_counts() -> None:
    out = socratic("scenarios", "--suite", "visible", "--filter", "category=decode")
    assert out.returncode == 0
    assert "decode-llama3-8b-tp1-q1-b1-k32768" in out.stdout or "(h)" not in out.stdout
    assert out.stdout.strip().splitlines()[-1].endswith("0 hidden)")


def test_bad_filter_is_a_clear_error() -> None:
    out = socratic("scenarios", "--filter", "colour=blue")
    assert out.returncode != 0
    assert "unknown scenario field 'colour'" in out.stderr


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU message")
def test_eval_without_gpu_says_so_in_one_line_and_fails() -> None:
    out = socratic("eval", str(ROOT / "kernels" / "attention" / "baseline.cu"))
    assert out.returncode == 3
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA GPU is available" in lines[0]


def test_eval_of_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    out = socratic("eval", str(tmp_path / "nope.cu"))
    assert out.returncode == 2 and "no such kernel file" in out.stderr


def test_eval_on_cpu_backend_prints_table_and_geomeans(tmp_path: Path) -> None:
    """The CPU path of `socratic eval` exists for the harness's own tests: a .cu file cannot
    run there, so it reports the load failure per scenario and still completes."""
    out = socratic("eval", str(ROOT / "kernels" / "attention" / "baseline.cu"), "--device", "cpu",
                   "--filter", "ragged-d64-q77-k77-causal", "--no-peers",
                   "--json", str(tmp_path / "r.json"))
    assert out.returncode == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert [s["scenario"] for s in report["scenarios"]] == ["ragged-d64-q77-k77-causal"]
    assert "geomean" in out.stdout


def test_check_passes_the_baseline_and_names_banned_lines(tmp_path: Path) -> None:
    ok = socratic("check", str(ROOT / "kernels" / "attention" / "baseline.cu"))
    assert ok.returncode == 0 and "static checks passed" in ok.stdout
    bad = tmp_path / "bad.cu"
    bad.write_text('#include "contract.h"\n#include <cublas_v2.h>\nvoid f() { cudaDeviceSynchronize(); }\n')
    out = socratic("check", str(bad))
    assert out.returncode == 1
    assert f"{bad}:2: error: includes cublas_v2.h: cuBLAS is not allowed" in out.stdout
    assert f"{bad}:3: error: calls cudaDeviceSynchronize" in out.stdout


def test_eval_with_a_peer_cache_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "peers"
    not_a_folder.write_text("x")
    out = socratic("eval", str(ROOT / "kernels" / "attention" / "baseline.cu"), "--peer-cache", str(not_a_folder))
    assert out.returncode == 2 and "--peer-cache must name a folder" in out.stderr
    assert not_a_folder.read_text() == "x"
