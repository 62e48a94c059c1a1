"""`socratic cluster scheduler|worker|status`: start a Dask cluster of GPU workers for the
cluster executor (harness/cluster.py) and see what each GPU is evaluating."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def _address(args: argparse.Namespace) -> str:
    address = args.cluster or os.environ.get("SOCRATIC_CLUSTER")
    if not address:
        raise SystemExit("socratic cluster: give --cluster ADDRESS (or set SOCRATIC_CLUSTER)")
    return str(address)


def render_status(rows: list[dict[str, Any]], address: str) -> str:
    lines = [f"cluster {address}: {len(rows)} worker(s), "
             f"{sum(1 for r in rows if r['running'])} evaluating, "
             f"{sum(len(r['waiting']) for r in rows)} shard(s) waiting"]
    for r in rows:
        gpu = f"GPU {r['gpu']}" if r["gpu"] else "no CUDA_VISIBLE_DEVICES"
        doing = "; ".join(r["running"]) or "idle"
        lines.append(f"  {r['name']:<10} {r['address']:<24} {gpu:<12} pid {r['pid']}  {doing}")
        lines.extend(f"      waiting: {w}" for w in r["waiting"])
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    from harness.cluster import ClusterExecutor

    address = _address(args)
    executor = ClusterExecutor(address, connect_timeout_s=args.timeout)
    try:
        rows = executor.status()
    except OSError as exc:
        print(f"socratic cluster status: cannot reach {address}: {exc}", file=sys.stderr)
        return 3
    finally:
        executor.close()
    print(json.dumps(rows, indent=1) if args.json else render_status(rows, address))
    return 0


def cmd_scheduler(args: argparse.Namespace) -> int:
    argv = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", args.host,
            "--port", str(args.port), "--no-dashboard"]
    return _become(argv, dict(os.environ))


def cmd_worker(args: argparse.Namespace) -> int:
    from harness.cluster import worker_command

    argv, env = worker_command(_address(args), args.gpu, args.name)
    return _become(argv, env)


def _become(argv: list[str], env: dict[str, str]) -> int:
    """This process becomes the Dask process (exec), so that a supervisor's SIGTERM reaches the
    scheduler or worker itself instead of leaving it running behind a wrapper."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
    return 0  # not reached


def add_cluster_commands(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser("cluster", help="a Dask cluster of GPU workers for evaluations")
    csub = cluster.add_subparsers(dest="cluster_command", required=True)

    p = csub.add_parser("status", help="each worker's GPU, the shard it evaluates and its queue")
    p.add_argument("--cluster", metavar="ADDRESS", help="scheduler address (default $SOCRATIC_CLUSTER)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the scheduler")
    p.set_defaults(func=cmd_status)

    p = csub.add_parser("scheduler", help="run the cluster's scheduler (the address workers and servers use)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8786)
    p.set_defaults(func=cmd_scheduler)

    p = csub.add_parser("worker", help="run one worker for one GPU (start one per GPU of the node)")
    p.add_argument("--cluster", metavar="ADDRESS", help="scheduler address (default $SOCRATIC_CLUSTER)")
    p.add_argument("--gpu", default="0", help="CUDA device index this worker owns, or 'cpu' (default 0)")
    p.add_argument("--name", help="worker name shown by `status` (default gpuN)")
    p.set_defaults(func=cmd_worker)
