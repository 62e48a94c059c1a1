"""The cluster executor on a GPU: a local Dask cluster whose two worker processes share GPU 0
(what a one-GPU machine allows) evaluates the gallery kernel sharded over both; every
scenario's status equals a local evaluation's, and the compiled library reached the workers
as bytes."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

from harness.attention.suite import default_suite
from harness.cluster import ClusterExecutor
from harness.evaluate import evaluate_source
from harness.executor import LocalExecutor
from harness.settings import EvalSettings
from harness.suite import select
from tests.conftest import ROOT
from tests.harness.support import start_cluster

pytestmark = pytest.mark.gpu


def test_a_sharded_evaluation_on_two_workers_of_one_gpu_matches_the_local_one() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery" / "fa2-mma-a.cu"
    suite = default_suite()
    chosen = select(suite, "all", "category=decode")[:8] + select(suite, "all", "ragged-d128*")[:8]
    settings = EvalSettings(peers=())
    local = evaluate_source(gallery, chosen, settings=settings, executor=LocalExecutor())
    cluster = start_cluster(2)  # both workers inherit this process's CUDA_VISIBLE_DEVICES
    executor = ClusterExecutor(cluster.scheduler_address)
    try:
        sharded = evaluate_source(gallery, chosen, settings=settings, executor=executor)
    finally:
        executor.close()
        cluster.close()
    assert [(r.scenario, r.status) for r in sharded.scenarios] == [(r.scenario, r.status) for r in local.scenarios]
    shards = sharded.settings["device_info"]["cluster"]["shards"]
    assert len(shards) == 2 and len({s["worker"] for s in shards}) == 2
    assert sharded.gpu == local.gpu
