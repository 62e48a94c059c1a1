"""The cluster executor on a GPU machine (not a test): a Dask cluster on loopback with one
worker process per entry of --gpus (default "0,0": two workers sharing GPU 0, the proof that
fits a one-GPU machine; "0,1" on two GPUs), then

1. one evaluation of KERNEL on this machine (LocalExecutor; twice, so the compared run has the
   compile and baseline caches the sharded run has) and the same evaluation sharded over the
   cluster's workers: wall times, their ratio, and whether every scenario's status is the same
   (and the geomeans of both);
2. two evaluations submitted at once, each kept on one worker (as two sessions' are): where
   each ran and whether they overlapped in time.

    PYTHONPATH=. python3 scripts/cluster_gpu_proof.py kernels/attention/gallery/fa2-mma-a.cu \\
        [--gpus 0,0] [--filter EXPR] [--concurrent-filter EXPR] [--json OUT]

Two workers on one GPU share it: their timings disturb each other, so this shows scheduling,
isolation and merged verdicts, not a speedup (which needs one GPU per worker)."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from harness.attention.suite import default_suite
from harness.cluster import GPU_RESOURCE, WORKER_ENV, ClusterExecutor
from harness.evaluate import evaluate_source
from harness.executor import LocalExecutor
from harness.report import EvaluationReport
from harness.settings import EvalSettings
from harness.suite import select


def start_cluster(gpus: list[str]) -> Any:
    """A scheduler in this process and one nanny-supervised worker process per GPU entry."""
    import dask
    from distributed import Nanny, Scheduler
    from distributed.utils import LoopRunner, sync

    os.environ.update(WORKER_ENV)
    dask.config.set({"distributed.worker.daemon": False})
    runner = LoopRunner(asynchronous=False)
    runner.start()

    async def boot() -> tuple[Any, list[Any]]:
        scheduler = await Scheduler(host="127.0.0.1", port=0, dashboard=False)
        nannies = []
        for i, gpu in enumerate(gpus):
            nanny = await Nanny(scheduler.address, nthreads=1, resources={GPU_RESOURCE: 1}, name=f"gpu{gpu}-w{i}",
                                env={"CUDA_VISIBLE_DEVICES": gpu, **WORKER_ENV}, dashboard_address=None)
            nannies.append(nanny)
        return scheduler, nannies

    scheduler, nannies = sync(runner.loop, boot)

    def stop() -> None:
        async def down() -> None:
            for n in nannies:
                await n.close()
            await scheduler.close()

        sync(runner.loop, down)
        runner.stop()

    return scheduler.address, stop


def verdicts(report: EvaluationReport) -> dict[str, str]:
    return {r.scenario: r.status for r in report.scenarios}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", type=Path)
    ap.add_argument("--gpus", default="0,0", help="one worker per entry: CUDA device indices (default 0,0)")
    ap.add_argument("--filter", default=None, help="scenarios of the sharded comparison (default: all 182)")
    ap.add_argument("--concurrent-filter", default="category=decode",
                    help="scenarios of each of the two concurrent evaluations (default category=decode)")
    ap.add_argument("--local-runs", type=int, default=2,
                    help="local evaluations before the sharded one; the last is compared (default 2)")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    args = ap.parse_args()
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    scenarios = select(default_suite(), "all", args.filter)
    settings = EvalSettings()
    out: dict[str, Any] = {"kernel": str(args.kernel), "gpus": gpus, "scenarios": len(scenarios)}

    # The local executor twice: the first run compiles and fills the baseline cache (a GPU's
    # first evaluation of the day), the second is a fresh process with both warm, which is
    # what the sharded run (same caches, on the workers) is compared with.
    local_runs = []
    for k in range(max(1, args.local_runs)):
        t0 = time.monotonic()
        local = evaluate_source(args.kernel, scenarios, settings=settings, executor=LocalExecutor())
        local_runs.append(round(time.monotonic() - t0, 1))
        print(f"local executor run {k + 1}: {len(scenarios)} scenarios in {local_runs[-1]} s on {local.gpu}",
              flush=True)
    out["local_runs_s"], out["local_s"] = local_runs, local_runs[-1]

    t0 = time.monotonic()
    address, stop = start_cluster(gpus)
    out["cluster_start_s"] = round(time.monotonic() - t0, 1)
    print(f"cluster at {address}: {len(gpus)} workers (GPUs {gpus}) started in {out['cluster_start_s']} s",
          flush=True)
    executor = ClusterExecutor(address)
    try:
        t0 = time.monotonic()
        sharded = evaluate_source(args.kernel, scenarios, settings=settings, executor=executor)
        out["sharded_s"] = round(time.monotonic() - t0, 1)
        shards = sharded.settings["device_info"]["cluster"]["shards"]
        out["shards"] = shards
        a, b = verdicts(local), verdicts(sharded)
        differ = sorted(n for n in a if a[n] != b.get(n))
        out["verdicts_identical"] = not differ and a.keys() == b.keys()
        out["differing"] = differ
        out["local_verdict"], out["sharded_verdict"] = local.verdict(), sharded.verdict()
        out["local_geomean"] = local.summary("all").vs_baseline
        out["sharded_geomean"] = sharded.summary("all").vs_baseline
        print(f"sharded over {len(shards)} workers: {out['sharded_s']} s "
              f"(local/sharded = {out['local_s'] / max(out['sharded_s'], 1e-9):.2f}x)")
        for s in shards:
            print(f"  shard {s['shard']}: {s['scenarios']} scenarios on {s['name']} ({s['worker']}), "
                  f"{s['seconds']} s, eval process pid {s['pid']}")
        print(f"verdicts identical per scenario: {out['verdicts_identical']}"
              + (f" (differ: {differ})" if differ else ""))
        print(f"report verdicts: local {out['local_verdict']}, sharded {out['sharded_verdict']}; geomean vs "
              f"baseline: local {out['local_geomean']}, sharded {out['sharded_geomean']}", flush=True)

        few = select(default_suite(), "all", args.concurrent_filter)
        results: dict[int, EvaluationReport] = {}

        def one(k: int) -> None:
            results[k] = evaluate_source(args.kernel, few, settings=settings, executor=executor.one_device())

        t0 = time.monotonic()
        threads = [threading.Thread(target=one, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out["concurrent_s"] = round(time.monotonic() - t0, 1)
        placed = [results[k].settings["device_info"]["cluster"]["shards"][0] for k in range(2)]
        overlap = min(p["ended"] for p in placed) - max(p["began"] for p in placed)
        out["concurrent"] = placed
        out["concurrent_on_distinct_workers"] = len({p["worker"] for p in placed}) == 2
        out["concurrent_overlap_s"] = round(overlap, 1)
        print(f"two concurrent evaluations of {len(few)} scenarios: {out['concurrent_s']} s in all")
        for k, p in enumerate(placed):
            print(f"  evaluation {k + 1}: on {p['name']} ({p['worker']}), {p['seconds']} s, "
                  f"verdict {results[k].verdict()}")
        print(f"each on its own worker: {out['concurrent_on_distinct_workers']}; "
              f"ran at the same time for {out['concurrent_overlap_s']} s", flush=True)
    finally:
        executor.close()
        stop()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0 if out.get("verdicts_identical") and out.get("concurrent_on_distinct_workers") else 1


if __name__ == "__main__":
    raise SystemExit(main())
