"""Bad input everywhere: schemathesis drives every operation of the app's own OpenAPI schema.

Property: no input produces a 5xx. Cases carry the admin token (so they reach the handlers, not
just the 401), and episode-scoped operations point at a live episode (so tool-call bodies reach
the sandbox). Valid and invalid cases are mixed; the example count per operation is bounded to
keep the area's test time small.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from tests.gateway.conftest import Gateway

EXAMPLES_PER_OPERATION = 25


def test_no_input_yields_a_server_error(gateway: Gateway) -> None:
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json")
    live = gateway.new_episode()
    headers = {"Authorization": f"Bearer {gateway.admin_token}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10

    for operation in operations:
        both = st.one_of(
            operation.as_strategy(schemathesis.GenerationMode.POSITIVE),
            operation.as_strategy(schemathesis.GenerationMode.NEGATIVE),
        )

        @given(case=both)
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case) -> None:
            if case.path_parameters and not case.path.endswith("/finish"):
                case.path_parameters["episode_id"] = live.id
            case.call_and_validate(
                base_url=gateway.url, headers=headers, checks=[not_a_server_error], timeout=120
            )

        fuzz()

    with gateway.admin() as admin:
        reached = admin.get(f"/v1/episodes/{live.id}").json()
    assert reached["num_calls"] > 0 and reached["sub_trajectories"], "fuzzing never reached the handlers"
