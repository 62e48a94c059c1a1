"""An evaluation process ends when the process that started it is gone.

A worker process (harness/worker.py) is spawned by the executor that waits for its results: the
CLI, the server, or a cluster worker's shard task (harness/cluster.py). If that parent is killed
(a cluster worker lost mid-shard, the server killed with SIGKILL), nothing would stop its child:
it would go on timing a kernel on the GPU while the scheduler has already given the shard, or the
next candidate, to another process on the same GPU, and both measurements would be disturbed.

So every worker process watches its parent: the executor passes its own pid, the worker exits
at once if it is no longer its parent (the executor died while the worker was still importing
torch), and a daemon thread then compares os.getppid() with it, exiting with ORPHANED_EXIT from
whatever the process is doing once it has been re-parented (to init or a subreaper). Polling, not PR_SET_PDEATHSIG: the
kernel sends that signal when the *thread* that forked the child ends, and the executors start
processes from short-lived threads."""

from __future__ import annotations

import os
import threading
import time

ORPHANED_EXIT = 86
POLL_S = 0.05

_started = False
_lock = threading.Lock()


def follow_parent(parent: int | None = None, poll_s: float = POLL_S) -> None:
    """Exit this process within about `poll_s` of the death of `parent` (the executor's pid; by
    default the parent of now). Idempotent."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    if parent is None:
        parent = os.getppid()
    elif os.getppid() != parent:
        os._exit(ORPHANED_EXIT)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="socratic-lifeline", daemon=True).start()
