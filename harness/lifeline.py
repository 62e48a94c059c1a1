"""An evaluation process ends when the process that started it is gone.

A worker process (harness/worker.py) is spawned by the executor that waits for its results: the
CLI, the server, or a cluster worker's shard task (harness/cluster.py). If that parent is killed
(a cluster worker lost mid-shard, the server killed with SIGKILL), nothing would stop its child:
it would go on timing a kernel on the GPU while the scheduler has already given the shard, or the
next candidate, to another process on the same GPU, and both measurements would be disturbed.

So every worker process watches its parent: a daemon thread compares os.getppid() with the
parent it started under, and when the process has been re-parented (to init or a subreaper) it
exits at once, with ORPHANED_EXIT, from whatever it was doing. Polling, not PR_SET_PDEATHSIG: the
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


def follow_parent(poll_s: float = POLL_S) -> None:
    """Exit this process within about `poll_s` of its parent's death. Idempotent."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="socratic-lifeline", daemon=True).start()
