"""A bounded schemathesis run against a web node's public API (its ASGI app, in process).

Every operation of the OpenAPI schema, authenticated through a login hook (a rostered
student's access code -> POST /v1/sessions -> Bearer token). Checks, each on every response:
``not_a_server_error`` (no 5xx), ``status_code_conformance`` (every status is documented),
``content_type_conformance``, ``response_schema_conformance`` (the body matches the
documented schema of that status) and ``response_headers_conformance``. Bounded by
``MAX_EXAMPLES`` per operation and derandomized, so the run is reproducible and small.
"""

from __future__ import annotations

from collections import Counter

import pytest

import schemathesis
from starlette.responses import JSONResponse
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import checks
from schemathesis import GenerationMode
from web_support import ROSTER, RecordingDispatcher, TestClient, start, token_for

from stack.config import Settings
from stack.web.app import create_app

MAX_EXAMPLES = 50
CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
          checks.response_schema_conformance, checks.response_headers_conformance]


class RosterLogin:
    """The login hook: a token for a rostered student, fetched through the API itself."""

    def get(self, case: schemathesis.Case, context: schemathesis.AuthContext) -> str:
        code = ROSTER["NOVA-101"]["s-1"]
        client = TestClient(context.app)  # no `with`: the node's lifespan is the test's, not the hook's
        response = client.post("/v1/sessions", json={"student_id": "s-1", "exam_code": "NOVA-101", "access_code": code})
        assert response.status_code == 201, response.text
        return str(response.json()["token"])

    def set(self, case: schemathesis.Case, data: str, context: schemathesis.AuthContext) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


def _exercise(operation: schemathesis.APIOperation, strategy_args: dict, statuses: Counter) -> None:  # type: ignore[type-arg]
    @given(case=operation.as_strategy(**strategy_args))
    @settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case: schemathesis.Case) -> None:
        response = case.call_and_validate(checks=CHECKS)
        statuses[response.status_code] += 1

    try:
        run()
    except Unsatisfiable:
        # Negative mode on an operation with nothing to get wrong (no parameters, no body).
        if strategy_args["generation_mode"] is not GenerationMode.NEGATIVE:
            raise


def _serving_its_schema(app):  # type: ignore[no-untyped-def]
    """The public app with its schema at /openapi.json: a node serves it on the admin listener
    only (``/openapi/public.json``), so the test hands it to schemathesis itself."""
    async def wrapped(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and scope["path"] == "/openapi.json":
            await JSONResponse(app.openapi())(scope, receive, send)
        else:
            await app(scope, receive, send)
    return wrapped


def _run_schemathesis(app, statuses: Counter) -> int:  # type: ignore[no-untyped-def]
    """Every operation, positive and negative, as a rostered student; returns the operation count."""
    with TestClient(app) as client:  # run the lifespan, as a served node would
        schema = schemathesis.openapi.from_asgi("/openapi.json", _serving_its_schema(app))
        schema.auth.auth()(RosterLogin)
        attempt = start(client, token_for(client, "s-1"))  # a real attempt of the hook's student
        operations = [result.ok() for result in schema.get_all_operations()]
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                args = {"generation_mode": mode, "auth_storage": schema.auth}
                _exercise(operation, args, statuses)
                if "{attempt_id}" in operation.path:  # deeper than a 404: the student's own attempt
                    _exercise(operation, {**args, "path_parameters": {"attempt_id": attempt}}, statuses)
    return len(operations)


def test_no_input_gives_a_5xx_or_breaks_the_schema(settings: Settings, ledger) -> None:  # type: ignore[no-untyped-def]
    statuses: Counter = Counter()
    operations = _run_schemathesis(create_app(settings, dispatcher=RecordingDispatcher()), statuses)
    print(f"\nschemathesis {schemathesis.SCHEMATHESIS_VERSION}: {operations} operations, "
          f"{sum(statuses.values())} requests, statuses {dict(sorted(statuses.items()))}")
    assert not [code for code in statuses if code >= 500]
    assert sum(statuses.values()) >= operations  # it did run


def test_the_run_catches_a_route_that_answers_500(settings: Settings, ledger) -> None:  # type: ignore[no-untyped-def]
    """Negative control: the same run against a node whose merit-card route fails must fail."""
    app = create_app(settings, dispatcher=RecordingDispatcher())

    @app.middleware("http")
    async def broken_merit_card(request, call_next):  # type: ignore[no-untyped-def]
        if request.url.path.endswith("/merit-card"):
            return JSONResponse({"detail": "planted failure"}, status_code=500)
        return await call_next(request)

    with pytest.raises(BaseException) as caught:  # schemathesis groups several failures (BaseExceptionGroup)
        _run_schemathesis(app, Counter())
    found = [type(e).__name__ for e in _flatten(caught.value)]
    assert "ServerError" in found, found


def _flatten(exc: BaseException) -> list[BaseException]:
    return [exc] + [inner for sub in getattr(exc, "exceptions", ()) for inner in _flatten(sub)]
