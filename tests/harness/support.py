"""What several harness tests share: the CPU backend's small suite and quick timing, the
evaluation processes found in /proc, and a Dask cluster on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.scenario import Scenario
from harness.timing import TimingSettings

# Three shapes that tell the usual bugs apart: causal square, bottom-right causal (hidden),
# and a non-causal batch of two with fewer keys than queries.
SCENARIOS = [
    Scenario("small-causal", "prefill", 1, 77, 77, 4, 2, 64, causal=True),
    Scenario("bottom-right", "chunked", 1, 40, 130, 4, 1, 32, causal=True, hidden=True),
    Scenario("full-ragged", "ragged", 2, 100, 33, 2, 2, 64, causal=False),
]
FAST = TimingSettings(budget_ms=2, min_reps=3, min_reps_slow=3, max_reps=5, wall_reps=2)


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc), evaluation workers only."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and "multiprocessing" in cmdline and "resource_tracker" not in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def start_cluster(workers: int = 2, **config: Any) -> Any:
    """A Dask LocalCluster on loopback whose worker processes each declare one GPU slot (the
    CPU backend runs there), with `config` set while it starts."""
    import dask
    import distributed

    settings = {"distributed.worker.daemon": False, **config}
    with dask.config.set(settings):
        return distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        resources={"GPU": 1}, dashboard_address=":0")
