"""Property-based requests over the whole JSON API (Schemathesis reads /openapi.json and
generates valid and invalid requests for every operation): no request may get a server
error. Runs against a real `socratic serve` on loopback, seeded with a session, an imported
trace (a session with candidates to fork) and the starter bank so that generated ids name
real rows. Two phases: each operation alone, then the stateful phase, which follows the links
Schemathesis infers between operations (a listed session's id into its fork, a question's id
into its edit) so that sequences reach the fork and bank routes with real ids. Bounded so that
both take about two minutes on two cores; SOCRATIC_FUZZ_EXAMPLES and SOCRATIC_FUZZ_SCENARIOS
raise the counts for a deeper run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from tests.server_support import live_server

EXAMPLES = int(os.environ.get("SOCRATIC_FUZZ_EXAMPLES", "8"))
SCENARIOS = int(os.environ.get("SOCRATIC_FUZZ_SCENARIOS", "60"))  # stateful sequences
STEPS = 8  # calls per sequence at most
ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_TRACE = ROOT / "examples" / "h200-offline-silent.jsonl"


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


def imported(data_dir: Path) -> None:
    """A real trace in the database before the server starts: a session with candidates to fork."""
    done = subprocess.run([sys.executable, "-m", "app", "trace", "import", str(EXAMPLE_TRACE), "--data-dir",
                           str(data_dir)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_linked_sequences_reach_fork_and_bank_routes_without_a_server_error(tmp_path: Path) -> None:
    """The stateful phase: sequences of calls that feed one response's ids into the next call."""
    imported(tmp_path)
    env = {"SOCRATIC_BANK_SEMANTIC_SEARCH": "0"}
    with live_server(tmp_path, env=env) as base:
        seed(base)
        # The read-only profile route (one more link from every candidate) is fuzzed in the first
        # phase; here it would only dilute the sequences that must reach fork and the bank's edit.
        schema = schemathesis.openapi.from_url(f"{base}/openapi.json").exclude(
            path="/api/sessions/{session_id}/candidates/{number}/profile")
        calls: list[tuple[str, str, int]] = []
        failures: list[str] = []

        class Machine(schema.as_state_machine()):  # type: ignore[misc]
            def get_call_kwargs(self, case: Any) -> dict[str, Any]:
                return {"base_url": base, "timeout": 30}

            def validate_response(self, response: Any, case: Any, additional_checks: Any = None,
                                  **kwargs: Any) -> None:
                calls.append((case.method.upper(), case.operation.path, response.status_code))
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                                    f"body={str(case.body)[:200]!r}: {response.text[:300]}")

        Machine.run(settings=settings(max_examples=SCENARIOS, stateful_step_count=STEPS, deadline=None,
                                      database=None, derandomize=True, suppress_health_check=list(HealthCheck)))
        assert not failures, "server errors:\n" + "\n".join(failures[:20])

        def reached(method: str, path: str) -> set[int]:
            return {status for m, p, status in calls if m == method and p == path}

        fork = reached("POST", "/api/sessions/{session_id}/candidates/{number}/fork")
        edit = reached("PATCH", "/api/bank/questions/{question_id}")
        # Past the 404 of a made-up id: a real session's candidate was forked, a real question edited.
        assert fork - {404}, f"the fork route was never reached with a real candidate: {sorted(fork)}"
        assert edit - {404}, f"the bank's edit was never reached with a real question: {sorted(edit)}"
        assert httpx.get(f"{base}/api/health", timeout=10).status_code == 200


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


pytestmark = pytest.mark.timeout(420)
