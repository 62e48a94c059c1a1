"""Property-based requests over the whole JSON API (Schemathesis reads /openapi.json and
generates valid and invalid requests for every operation): no request may get a server
error. Runs against a real `socratic serve` on loopback, seeded with a session and the
starter bank so that generated ids sometimes name real rows. Bounded so that it takes well
under a minute on two cores; SOCRATIC_FUZZ_EXAMPLES raises the count for a deeper run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from tests.server_support import live_server

EXAMPLES = int(os.environ.get("SOCRATIC_FUZZ_EXAMPLES", "8"))


def seed(base: str) -> None:
    r = httpx.post(f"{base}/api/sessions", json={"title": "seed", "agent": "offline", "candidate_kind": "cuda",
                                                 "start": False}, timeout=30)
    assert r.status_code == 201, r.text


def test_no_generated_request_gets_a_server_error(tmp_path: Path) -> None:
    env = {"SOCRATIC_BANK_SEMANTIC_SEARCH": "0"}
    with live_server(tmp_path, env=env) as base:
        seed(base)
        schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
        failures: list[str] = []
        operations = 0
        for result in schema.get_all_operations():
            operation = result.ok()
            operations += 1
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                run_operation(operation, mode, base, failures)
        assert operations >= 25, f"the OpenAPI document lists only {operations} operations"
        assert not failures, "server errors:\n" + "\n".join(failures[:20])
        assert httpx.get(f"{base}/api/sessions", timeout=10).status_code == 200


def run_operation(operation: Any, mode: GenerationMode, base: str, failures: list[str]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        response = case.call(base_url=base, timeout=30)
        if response.status_code >= 500:
            failures.append(f"{case.method} {case.formatted_path} ({mode.value}) -> {response.status_code}: "
                            f"query={case.query!r} body={str(case.body)[:200]!r}: {response.text[:300]}")

    try:
        check()
    except Exception as exc:  # generation can be unsatisfiable for an operation: say which
        if "Unsatisfiable" not in type(exc).__name__:
            raise


pytestmark = pytest.mark.timeout(240)
