"""Command-line front of the harness: `socratic scenarios`, `socratic eval`, `socratic check`.
Commands only translate arguments into harness calls and results into text."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.caches import keep_bytecode
from harness.report import PASS, EvaluationReport, render_table
from harness.scenario import Scenario
from harness.suite import SUITE_PARTS, select
from harness.timing import TimingSettings  # no torch: the default budget for --budget-ms

if TYPE_CHECKING:
    from harness.executor import Executor, LocalExecutor, Progress


def _problem_suite() -> list[Scenario]:
    from harness.attention.suite import default_suite

    return default_suite()


def _select(args: argparse.Namespace) -> list[Scenario]:
    try:
        return select(_problem_suite(), args.suite, args.filter)
    except ValueError as exc:
        raise SystemExit(f"socratic: {exc}") from exc


def cmd_scenarios(args: argparse.Namespace) -> int:
    chosen = _select(args)
    if args.json:
        from harness.attention.fields import describe_scales
        from harness.attention.forward import attention_flops, attention_min_bytes

        rows = [
            {**s.to_dict(), "flops": attention_flops(s), "bytes": attention_min_bytes(s),
             **describe_scales(s)}
            for s in chosen
        ]
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"{'name':<44} {'category':<9} {'hid':<4} {'b':>4} {'sq':>6} {'sk':>6} "
          f"{'hq':>4} {'hkv':>4} {'d':>4} causal")
    for s in chosen:
        print(f"{s.name:<44} {s.category:<9} {'yes' if s.hidden else '':<4} {s.batch:>4} "
              f"{s.seqlen_q:>6} {s.seqlen_k:>6} {s.heads_q:>4} {s.heads_kv:>4} "
              f"{s.head_dim:>4} {'yes' if s.causal else 'no'}")
    hidden = sum(s.hidden for s in chosen)
    print(f"{len(chosen)} scenarios ({len(chosen) - hidden} visible, {hidden} hidden)")
    return 0


class ProgressBar:
    """One updating line on a terminal; one line per scenario otherwise (logs, CI)."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.stream = stream
        self.started = time.monotonic()
        self.tty = stream.isatty()
        self.failures = 0

    def __call__(self, p: Progress) -> None:
        if p.result is not None and p.result.status != PASS:
            self.failures += 1
        width = 28
        filled = int(width * p.done / max(1, self.total))
        bar = "#" * filled + "." * (width - filled)
        elapsed = time.monotonic() - self.started
        eta = elapsed / p.done * (self.total - p.done) if p.done else 0.0
        if p.result is not None:
            r = p.result
            tail = f"{r.scenario} {r.status}"
            if r.speedup_vs_baseline is not None:
                tail += f" {r.speedup_vs_baseline:.2f}x"
        else:
            tail = p.message or (f"running {p.scenario}" if p.scenario else "")
        line = (f"[{bar}] {p.done}/{self.total} fail {self.failures} "
                f"{elapsed:5.0f}s eta {eta:4.0f}s  {tail}")
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
        elif p.result is not None or p.message:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def cmd_eval(args: argparse.Namespace) -> int:
    from harness.executor import LocalExecutor, gpu_device_nodes  # no torch yet

    source = Path(args.kernel)
    if not source.is_file():
        print(f"socratic eval: no such kernel file: {source}", file=sys.stderr)
        return 2
    if args.peer_cache and Path(args.peer_cache).exists() and not Path(args.peer_cache).is_dir():
        print(f"socratic eval: --peer-cache must name a folder, and {args.peer_cache} is a file",
              file=sys.stderr)
        return 2
    # The worker process starts now and imports torch while this one compiles: the evaluation's
    # own path (harness/evaluate.py, the executor, the compile) imports no torch, so nvcc starts
    # at once. It touches no GPU before its job arrives, and ends below if none does.
    local = None
    if args.device == "cuda" and not args.cluster and gpu_device_nodes():
        local = LocalExecutor()
        local.prestart()
    try:
        return _eval(args, source, local)
    finally:
        if local is not None:
            local.close()


def _eval(args: argparse.Namespace, source: Path, local: LocalExecutor | None) -> int:
    report = _evaluated(args, source, local)
    return report if isinstance(report, int) else print_report(report, args.json)


def _evaluated(args: argparse.Namespace, source: Path, local: LocalExecutor | None) -> EvaluationReport | int:
    """`socratic eval`'s evaluation (also `socratic profile`'s): the report, or an exit code."""
    from harness.evaluate import evaluate_source, gpu_available

    if args.device == "cuda" and not args.cluster and not gpu_available():
        print(f"socratic {args.command}: no CUDA GPU is available on this machine; run it where "
              "`python -c 'import torch; print(torch.cuda.is_available())'` prints True",
              file=sys.stderr)
        return 3
    scenarios = _select(args)
    if not scenarios:
        print(f"socratic {args.command}: no scenario matches the --suite/--filter given", file=sys.stderr)
        return 2
    from harness.settings import EvalSettings

    settings = EvalSettings(
        device=args.device,
        trials=args.trials,
        seed=args.seed,
        peers=() if args.no_peers else EvalSettings().peers,
        timing=TimingSettings(budget_ms=args.budget_ms),
        scenario_timeout_s=args.timeout,
        measure=not args.correctness_only,
        peer_cache_dir=str(Path(args.peer_cache).resolve()) if args.peer_cache else None,
        peer_cache_max_age_s=args.peer_cache_hours * 3600,
        baseline_cache=not args.time_baseline,
    )
    if local is not None:
        # This evaluation owns the GPU: the worker builds the peers' plans while nvcc compiles.
        local.warm("attention-forward", scenarios, settings)
    bar = ProgressBar(len(scenarios))
    executor: Executor | None = local
    cluster = None
    if args.cluster:
        from harness.cluster import ClusterExecutor

        executor = cluster = ClusterExecutor(args.cluster)  # sharded over the cluster's GPUs
    try:
        report = evaluate_source(
            source, scenarios, baseline=Path(args.baseline) if args.baseline else None,
            suite=args.suite, settings=settings, progress=bar, executor=executor,
        )
    finally:
        if cluster is not None:
            cluster.close()
    bar.close()
    return report


PYTHON_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def cmd_profile(args: argparse.Namespace) -> int:
    """Evaluate a kernel as `eval` does (same executor, same isolation), or read a report JSON,
    then print its profile (harness/profile.py). The verdict is the evaluation's, unchanged."""
    from harness.profile import parse_ncu_csv, profile_report, render_profile

    ncu: dict[str, dict[str, object]] = {}
    for item in args.ncu or []:
        where, _, path = item.partition("=")
        category, _, scenario = where.partition(":")
        if not path or not Path(path).is_file():
            print(f"socratic profile: --ncu takes CATEGORY[:SCENARIO]=DETAILS.csv, got {item!r}", file=sys.stderr)
            return 2
        ncu[category] = {"scenario": scenario, "metrics": parse_ncu_csv(Path(path).read_text())}
    report = _report_to_profile(args)
    if isinstance(report, int):
        return report
    profile = profile_report(report, ncu=ncu)
    print(render_profile(profile))
    if args.json:
        Path(args.json).write_text(json.dumps(profile.to_dict(), indent=1, allow_nan=False))
        print(f"profile written to {args.json}", file=sys.stderr)
    return 0 if report.all_passed else 1


def _report_to_profile(args: argparse.Namespace) -> EvaluationReport | int:
    target = args.kernel
    if target.endswith(".json"):
        try:
            return EvaluationReport.from_dict(json.loads(Path(target).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"socratic profile: {target} is not a readable evaluation report: {exc}", file=sys.stderr)
            return 2
    if PYTHON_TARGET.match(target) and not Path(target).exists():
        return _python_report(args, target)
    source = Path(target)
    if not source.is_file():
        print(f"socratic profile: no such kernel file: {source}", file=sys.stderr)
        return 2
    from harness.executor import LocalExecutor, gpu_device_nodes

    local = None
    if args.device == "cuda" and not args.cluster and gpu_device_nodes():
        local = LocalExecutor()
        local.prestart()
    try:
        return _evaluated(args, source, local)
    finally:
        if local is not None:
            local.close()


def _python_report(args: argparse.Namespace, target: str) -> EvaluationReport | int:
    """A python-cpu candidate (`module:function`, the server's CPU stand-ins) on the CPU backend,
    against the CPU baseline `--baseline` names (default: the correct reference stand-in)."""
    from harness.evaluate import evaluate_job
    from harness.job import KernelSpec, WorkerJob
    from harness.settings import EvalSettings

    scenarios = _select(args) if args.filter or args.suite != "all" else None
    if not scenarios:
        from harness.scenario import Scenario as S

        scenarios = [S("cpu-causal-d64", "prefill", 1, 77, 77, 4, 2, 64, causal=True),
                     S("cpu-full-ragged", "ragged", 2, 100, 33, 2, 2, 64, causal=False)]
    baseline = args.baseline or "tests.cpu_kernels:correct"
    settings = EvalSettings(device="cpu", trials=args.trials, seed=args.seed, peers=(),
                            timing=TimingSettings(budget_ms=args.budget_ms, min_reps=3, max_reps=5),
                            scenario_timeout_s=args.timeout, measure=not args.correctness_only)
    job = WorkerJob("attention-forward", KernelSpec(target, "python", target),
                    KernelSpec(baseline, "python", baseline), list(scenarios), settings)
    return evaluate_job(job, kernel=target, suite=args.suite)


def print_report(report: EvaluationReport, json_out: str | None) -> int:
    if not report.compile.ok:
        print("the kernel was not evaluated:", file=sys.stderr)
        print(report.compile.log.rstrip() or report.scenarios[0].reason, file=sys.stderr)
        print(f"verdict: {report.verdict()}")
    else:
        print(render_table(report))
        print(f"evaluated {len(report.scenarios)} scenarios in {report.seconds:.1f} s on "
              f"{report.gpu or 'unknown device'}")
        print(f"  {report.time_note()}")
    if json_out:
        Path(json_out).write_text(report.to_json())
        print(f"report written to {json_out}", file=sys.stderr)
    return 0 if report.all_passed else 1


def cmd_check(args: argparse.Namespace) -> int:
    """Static checks, then (where nvcc exists) the build's resource report and instruction mix."""
    from harness.static_checks import check_source

    source = Path(args.kernel)
    if not source.is_file():
        print(f"socratic check: no such kernel file: {source}", file=sys.stderr)
        return 2
    findings = check_source(source.read_text(errors="replace"))
    for f in findings:
        print(f"{source}:{f.line}: {'error' if f.blocking else 'warning'}: {f.message} [{f.rule}]")
    blocking = [f for f in findings if f.blocking]
    print(f"{len(blocking)} blocking finding(s)" if blocking else "static checks passed")
    out: dict[str, object] = {
        "kernel": str(source), "findings": [f.__dict__ for f in findings],
        "static_ok": not blocking,
    }
    code = 1 if blocking else 0
    if not blocking and not args.no_build:
        code = max(code, _check_build(source, args.arch, out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return code


def _check_build(source: Path, arch: str | None, out: dict[str, object]) -> int:
    from harness.compile import DEFAULT_INCLUDE, CompileError, compile_kernel, gencode_flags, nvcc_path
    from harness.evaluate import detect_arch
    from harness.resources import render_resources, resource_report
    from harness.shared_memory import nvcc_front_end, requests

    text = source.read_text(errors="replace")
    nvcc = nvcc_path()
    if nvcc is None:
        print("resources: nvcc was not found on this machine; the build was not checked")
        found = requests(text)
        if found:  # what the source says, not evaluated: the expressions need the compiler
            print("dynamic shared memory, as the source sets it (not evaluated without nvcc):")
            print("\n".join(f"  {r.describe()}" for r in found))
            out["dynamic_shared"] = [r.describe() for r in found]
        return 0
    arch = arch or detect_arch()
    try:
        built = compile_kernel(source, arch=arch)
    except CompileError as exc:
        print(f"compile failed ({arch}): {exc}")
        print(exc.log.rstrip())
        out["compile_ok"] = False
        return 1
    front_end = nvcc_front_end(nvcc, ["-std=c++17", *gencode_flags(arch), f"-I{DEFAULT_INCLUDE}"])
    report = resource_report(built.info.log, built.library, source=text, arch=arch, front_end=front_end)
    print(f"resources ({arch}, ptxas -v):")
    print(render_resources(report))
    out["compile_ok"] = True
    out["arch"] = arch
    out["resources"] = report.to_dict()
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    def suite_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--suite", choices=SUITE_PARTS, default="all",
                       help="visible, hidden or all scenarios (default all)")
        p.add_argument("--filter", default=None,
                       help="comma-separated terms, all must match: a name glob or substring, "
                            "or field=value (category=decode,head_dim=128)")

    p = sub.add_parser("scenarios", help="list the scenario suite")
    suite_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_scenarios)

    def eval_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--baseline", help="kernel to compare against (default: the problem's baseline)")
        suite_args(p)
        p.add_argument("--trials", type=int, default=2, help="correctness trials (default 2)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--budget-ms", type=float, default=TimingSettings().budget_ms,
                       help="device time per implementation per scenario for timing "
                            f"(default {TimingSettings().budget_ms:g})")
        p.add_argument("--timeout", type=float, default=120.0,
                       help="seconds one scenario may take before it counts as a hang (default 120)")
        p.add_argument("--no-peers", action="store_true",
                       help="do not time the peers (torch SDPA cuDNN and flash, FA3 where fa3-fwd loads)")
        p.add_argument("--peer-cache", metavar="DIR",
                       help="reuse peer times an earlier evaluation measured on this GPU (kept in DIR); the "
                            "report marks those ratios as cached. Default: every peer timed side by side")
        p.add_argument("--peer-cache-hours", type=float, default=24.0,
                       help="how old a cached peer time may be (default 24)")
        p.add_argument("--time-baseline", action="store_true",
                       help="time the naive baseline in this evaluation instead of taking its time from the "
                            "baseline cache (kept per GPU, software, scenario and baseline library)")
        p.add_argument("--correctness-only", action="store_true",
                       help="verify every scenario but time nothing")
        p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help=argparse.SUPPRESS)
        p.add_argument("--cluster", metavar="ADDRESS", default=os.environ.get("SOCRATIC_CLUSTER") or None,
                       help="evaluate on the Dask cluster at ADDRESS (tcp://host:8786), sharded over its GPUs "
                            "(default: $SOCRATIC_CLUSTER, else this machine)")

    p = sub.add_parser("profile", help="evaluate a kernel (or read a report) and print what bounds it")
    p.add_argument("kernel", help="the candidate .cu file, an evaluation report .json, or a python-cpu "
                                  "module:function")
    eval_args(p)
    p.add_argument("--json", metavar="OUT", help="also write the profile as JSON to OUT")
    p.add_argument("--ncu", action="append", metavar="CATEGORY[:SCENARIO]=CSV",
                   help="Nsight Compute's details page (ncu -i R --page details --csv) of a representative "
                        "launch of a category; repeatable")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("eval", help="verify and time a kernel over the suite")
    p.add_argument("kernel", help="the candidate .cu file")
    eval_args(p)
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "check", help="static checks, resource report and instruction mix of a kernel (no GPU)"
    )
    p.add_argument("kernel")
    p.add_argument("--arch", help="nvcc target such as sm_90a (default: this machine's GPU, else sm_90a)")
    p.add_argument("--no-build", action="store_true", help="static checks only, no nvcc")
    p.add_argument("--json", metavar="OUT", help="also write the findings and resources as JSON")
    p.set_defaults(func=cmd_check)

    from harness.cluster_cli import add_cluster_commands

    add_cluster_commands(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="socratic", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    keep_bytecode()  # before anything imports torch, here or in the workers started below
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
