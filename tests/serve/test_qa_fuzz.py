"""Schema-driven fuzzing (schemathesis) of POST /predict on a question-answering model: never a 5xx."""
from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

from servers import start  # noqa: E402
from test_qa_predict import qa_dir  # noqa: E402,F401 - the QA model with known answers


@pytest.fixture(scope="module")
def qa_api_schema(qa_dir):  # noqa: F811
    running = start(qa_dir, max_request_texts=8)
    yield schemathesis.openapi.from_url(f"{running.url}/openapi.json")
    running.stop()


schema = schemathesis.pytest.from_fixture("qa_api_schema")


@schema.include(path="/predict").parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_qa_predict_never_fails_with_5xx(case):
    response = case.call(timeout=30)
    assert response.status_code < 500, f"{case.method} {case.path} {case.body!r} -> {response.text[:300]}"
    if response.status_code >= 400:
        assert response.json()["detail"], response.text
    else:
        for answer in response.json()["predictions"]:
            assert set(answer) == {"answer", "start", "end", "score", "null_score"}
