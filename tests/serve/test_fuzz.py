"""Schema-driven fuzzing (schemathesis) of every operation in /openapi.json, over real HTTP: never a 5xx."""
from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402


@pytest.fixture(scope="session")
def api_schema(server):
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    response = case.call(timeout=30)
    assert response.status_code < 500, f"{case.method} {case.path} {case.body!r} -> {response.text[:300]}"
    if response.status_code >= 400:
        assert response.json()["detail"], response.text
