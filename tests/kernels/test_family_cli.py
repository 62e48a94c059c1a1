"""The family's command line and the scripts that read its measurements."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.kernels.family_helpers import family_parser


def test_cli_renders_to_a_file(tmp_path: Path) -> None:
    parser = family_parser()
    out = tmp_path / "k.cu"
    args = parser.parse_args(["family", "render", "split_kv=off,grid_order=m_fastest", "-o", str(out)])
    assert args.func(args) == 0
    assert "constexpr int kSplitWaves = 0;" in out.read_text()
    bad = parser.parse_args(["family", "render", "loader=bulk"])
    assert bad.func(bad) == 2


def test_family_cli_shows_and_renders_l2_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = family_parser()
    space = parser.parse_args(["family", "space"])
    assert space.func(space) == 0
    scheduling = capsys.readouterr().out.split("scheduling:", 1)[1].split("masking:", 1)[0]
    assert "wg_l2_sections   0 | 32 | 16" in scheduling
    out = tmp_path / "k.cu"
    args = parser.parse_args(["family", "render", "mma=wgmma,wg_l2_sections=32", "-o", str(out)])
    assert args.func(args) == 0
    assert "constexpr int kWgL2Sections = 32;" in out.read_text()
    bad = parser.parse_args(["family", "render", "mma=wgmma,wg_l2_sections=32,grid_order=head_fastest"])
    assert bad.func(bad) == 2


# -- scripts/variant_table.py --rounds: an arm read against its rounds and a null arm ------------


def test_rounds_table_prints_each_rounds_geomean_per_category(tmp_path: Path) -> None:
    import subprocess
    import sys

    def report(path: Path, ratios: dict[str, tuple[str, float]]) -> str:
        path.write_text(json.dumps({"scenarios": [
            {"scenario": name, "category": cat, "speedup_vs_baseline": x} for name, (cat, x) in ratios.items()]}))
        return str(path)

    r1 = report(tmp_path / "r1_A.json", {"p1": ("prefill", 1.0), "p2": ("prefill", 1.21), "d1": ("decode", 0.9)})
    r2 = report(tmp_path / "r2_A.json", {"p1": ("prefill", 1.0), "p2": ("prefill", 1.0), "d1": ("decode", 1.1)})
    n1 = report(tmp_path / "r1_N.json", {"p1": ("prefill", 1.0), "d1": ("decode", 1.0)})
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "variant_table.py"), "--rounds", f"N={n1}", f"A={r1},{r2}"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[1].split() == ["arm", "all", "decode", "prefill"]
    assert out[2].split() == ["N", "1.000", "1.000", "1.000"]
    # round 1: all = (1.0 * 1.21 * 0.9) ** (1/3), prefill = sqrt(1.21); round 2: 1.1 ** (1/3), 1.0
    assert out[3].split() == ["A", "1.029/1.032", "0.900/1.100", "1.100/1.000"]


def test_rounds_table_adds_a_column_per_head_dim_of_the_suites_scenarios(tmp_path: Path) -> None:
    import subprocess
    import sys

    # the reports carry no head dim: the table reads it from the suite by name, whatever the
    # category (gemma2-9b decodes at d256, a d128 prefill)
    rows = {"prefill-d64-s512-b32-h32-causal": ("prefill", 1.1), "prefill-d128-s1024-b16-h16-full": ("prefill", 0.9),
            "decode-gemma2-9b-tp1-q1-b128-k1024": ("decode", 1.2), "decode-llama3-8b-tp1-q4-b1-k32768": ("decode", 1.0)}
    path = tmp_path / "r1_A.json"
    path.write_text(json.dumps({"scenarios": [
        {"scenario": name, "category": cat, "speedup_vs_baseline": x} for name, (cat, x) in rows.items()]}))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "variant_table.py"), "--rounds", f"A={path}"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[1].split() == ["arm", "all", "decode", "prefill", "d64", "d128", "d256"]
    # d128: the llama decode (1.0) and the d128 prefill (0.9), geomean 0.949
    assert out[2].split()[4:] == ["1.100", "0.949", "1.200"]


def test_kernel_spans_groups_each_calls_kernels_after_its_flush_and_reads_medians(
        capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernel_spans_gpu", ROOT / "scripts" / "kernel_spans_gpu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    flush = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>>"
    attn, comb = "void fam::attn_fwd_sm90<128, true>", "void fam::attn_combine_burst<128>"
    records = [  # out of order, as the profiler may list them
        (120.0, 130.0, attn), (0.0, 60.0, flush), (100.0, 160.0, flush), (70.0, 80.0, attn),
        (81.0, 84.0, comb), (131.5, 134.5, comb),
        (200.0, 260.0, flush),  # a call whose kernels the profiler lost
        (300.0, 360.0, flush), (370.0, 380.0, attn),  # a call that ran the attention kernel only
        (400.0, 460.0, flush), (470.0, 481.0, attn), (482.0, 484.0, comb),
        # the kernel's own memset inside a call (a tile counter zeroed) is the call's, not a flush
        (500.0, 560.0, flush), (561.0, 562.0, "Memset (Device)"), (563.0, 573.0, attn),
    ]
    calls = mod.group_calls(records)
    assert [[n for n, _, _ in c] for c in calls] == [[attn, comb], [attn, comb], [attn], [attn, comb],
                                                     ["Memset (Device)", attn]]
    assert not mod.is_flush("Memset (Device)") and not mod.is_flush(comb)
    lines = mod.report("k", calls)
    # medians over the three calls with both kernels: spans 14, 14.5, 14; attention 10, 10, 11;
    # gaps 1, 1.5, 1; combine 3, 3, 2
    assert lines[0] == "  k: span 14.0 us over 3 calls, 2 calls with other kernels left out"
    assert lines[1] == f"        10.0 us  (gap before   0.0)  {attn}"
    assert lines[2] == f"         3.0 us  (gap before   1.0)  {comb}"
    assert mod.report("k", []) == ["  k: no call's kernels were recorded"]
    # a misspelled scenario or a missing kernel is refused by name before any GPU work
    assert mod.main(["missing.cu", "prefill-d64-s512-b32-h32-full"]) == 2
    assert "no kernel file 'missing.cu'" in capsys.readouterr().err
    assert mod.main([str(ROOT / "kernels" / "attention" / "baseline.cu"), "no-such-scenario"]) == 2
    assert "no scenario named 'no-such-scenario' in the suite" in capsys.readouterr().err


def test_ncu_ledger_groups_samples_by_execution_count_and_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
              "Instructions Executed", "stall_wait", "stall_long_sb", "stall_wait (Not Issued)"]
    rows = [  # a per-tile prologue (100 runs), a loop body (300), an epilogue (100)
        ["0x0", "IMAD R1, R2, R3, RZ", "10", "10", "100", "10", "0", "10"],
        ["0x10", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ", "30", "30", "300", "30", "0", "30"],
        ["0x20", "@!P0  BRA 0x10", "30", "30", "300", "0", "30", "0"],
        ["0x30", "STG.E desc[UR14][R8.64], R91", "30", "30", "100", "0", "30", "0"],
    ]
    page = tmp_path / "src.csv"
    with page.open("w", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "void k()"])
        w.writerow(header)
        w.writerows(rows)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ncu_ledger.py"), str(page), "--top", "2",
                          "--min-share", "20"], capture_output=True, text=True, check=True).stdout
    assert "instructions executed 800, samples 100" in out
    assert "stalls: long_sb 60.0%  wait 40.0%" in out  # "(Not Issued)" columns are not counted twice
    assert "executed       300:     2 instructions,  60.0% of samples,  75.0% of executed" in out
    assert "executed       100:     2 instructions,  40.0% of samples,  25.0% of executed" in out
    # runs break where the execution count changes: the prologue alone (10%) is under 20%
    assert "[    1-    2] executed      300 n=   2  60.0%  wait=30 long_sb=30  | HGMMAx1 BRAx1" in out
    assert "[    3-    3] executed      100 n=   1  30.0%" in out and "[    0-    0]" not in out
    bad = tmp_path / "not.csv"
    bad.write_text("ncu --help output\n")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "ncu_ledger.py"), str(bad)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "not an ncu --page source --csv export" in res.stderr


def test_ncu_drive_names_a_missing_scenario_before_it_touches_the_gpu() -> None:
    # scripts/ncu_pair_gpu.sh runs it under ncu on the device; a wrong name fails at once, here too
    import subprocess
    import sys

    script = str(ROOT / "scripts" / "ncu_drive.py")
    usage = subprocess.run([sys.executable, script], capture_output=True, text=True)
    assert usage.returncode == 2 and "KERNEL.cu|fa3 SCENARIO" in usage.stderr
    missing = subprocess.run([sys.executable, script, "fa3", "prefill-d999-nowhere"], capture_output=True,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert missing.returncode == 2 and "no scenario named 'prefill-d999-nowhere'" in missing.stderr


def test_clock_pair_refuses_bad_arguments_before_it_touches_the_gpu(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = str(ROOT / "scripts" / "clock_pair_gpu.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=ROOT, env=env)

    usage = run("3")
    assert usage.returncode == 2 and "SECONDS SCENARIO KERNEL.cu|fa3" in usage.stderr
    for bad in ("0", "-1", "soon"):
        r = run(bad, "prefill-d128-s1024-b16-h16-full", "fa3")
        assert r.returncode == 2 and f"SECONDS must be a positive number of seconds, not {bad!r}" in r.stderr
    gone = run("3", "prefill-d128-s1024-b16-h16-full", str(tmp_path / "gone.cu"))
    assert gone.returncode == 2 and "no kernel file" in gone.stderr and "gone.cu" in gone.stderr
    unknown = run("3", "prefill-d999-nowhere", "fa3")
    assert unknown.returncode == 2 and "no scenario named 'prefill-d999-nowhere'" in unknown.stderr
