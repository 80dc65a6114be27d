"""Best-effort dispatch against a real (throwaway, plain TCP) valkey-server, and the
module surface of the web package."""

from __future__ import annotations

import importlib
import inspect

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job
from sqlalchemy import Engine, select, update
from web_support import ADMIN, LOOPBACK, TestClient, auth, closed_port, start, token_for

from stack.config import Settings
from stack.ledger.schema import outbox
from stack.web.app import create_admin_app, create_app
from stack.web.dispatch import dispatch_pending
from stack.web.metrics import lane_samples


def _finish(client: TestClient) -> str:
    token = token_for(client)
    attempt = start(client, token)
    assert client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 202
    return attempt


@pytest.mark.parametrize("fresh", [False, True], ids=["pooled", "fresh-connections"])
def test_finish_enqueues_the_merit_job_without_ttl_and_the_rest_waits_for_the_card(
    settings: Settings, ledger: Engine, valkey_server: str, fresh: bool
) -> None:
    """Narrative and SMS read the merit card, so only the relay enqueues them, once it is ready."""
    settings = settings.with_overrides(valkey_url=valkey_server, valkey_fresh_connections=fresh)
    app = create_app(settings)
    with TestClient(app) as client, TestClient(create_admin_app(app), client=LOOPBACK) as admin:
        attempt = _finish(client)
        assert app.state.proctor.dispatcher.wait_idle(10)
        metrics = admin.get("/metrics", headers={"X-Admin-Token": ADMIN}).text
    with ledger.connect() as conn:
        rows = {r.kind: r for r in conn.execute(select(outbox))}
    assert {k: (r.status, r.attempts, r.job_id) for k, r in rows.items()} == {
        "merit": ("enqueued", 1, f"merit-{attempt}-1"), "narrative": ("pending", 0, None), "sms": ("pending", 0, None)
    }
    redis = Redis.from_url(valkey_server)
    try:
        assert Queue("merit", connection=redis).job_ids == [f"merit-{attempt}-1"]
        assert redis.ttl(Job.key_for(f"merit-{attempt}-1")) == -1  # no expiry on a must-run job
        samples = lane_samples(redis)
        assert {lane: s.depth for lane, s in samples.items()} == {"merit": 1, "ai": 0, "sms": 0}
        assert 0 <= samples["merit"].oldest_age < 60
    finally:
        redis.close()
    assert 'proctor_valkey_up{node="web_test"} 1' in metrics
    assert 'proctor_lane_depth{lane="merit"} 1' in metrics


def test_a_second_enqueue_of_the_same_job_pushes_nothing(settings: Settings, ledger: Engine, valkey_server: str) -> None:
    """The relay and the web node may both see the row pending: one job id in the list."""
    settings = settings.with_overrides(valkey_url=valkey_server)
    app = create_app(settings)
    with TestClient(app) as client:
        attempt = _finish(client)
        assert app.state.proctor.dispatcher.wait_idle(10)
    with ledger.begin() as conn:  # as if our mark_enqueued had been lost
        conn.execute(update(outbox).values(status="pending", attempts=0, job_id=None))
    redis = Redis.from_url(valkey_server)
    try:
        assert dispatch_pending(ledger, redis, settings, attempt) == 1  # merit; the rest waits for the card
        assert Queue("merit", connection=redis).count == 1
    finally:
        redis.close()


def test_dispatch_with_valkey_down_swallows_the_error(settings: Settings, ledger: Engine) -> None:
    app = create_app(settings)
    with TestClient(app) as client:
        attempt = _finish(client)
        assert app.state.proctor.dispatcher.wait_idle(10)
    redis = Redis.from_url(f"redis://127.0.0.1:{closed_port()}/0")
    try:
        assert dispatch_pending(ledger, redis, settings, attempt) == 0
    finally:
        redis.close()
    with ledger.connect() as conn:
        assert set(conn.execute(select(outbox.c.status)).scalars()) == {"pending"}


MODULES = [
    "stack.web.app", "stack.web.auth", "stack.web.dispatch", "stack.web.metrics", "stack.web.routes.common",
    "stack.web.routes.sessions", "stack.web.routes.attempts", "stack.web.routes.answers",
    "stack.web.routes.outcomes", "stack.web.routes.admin", "stack.web.routes.health",
    "stack.ledger.attempts", "stack.ledger.revisions", "stack.ledger.exports", "stack.ledger.grading", "stack.ledger.outbox",
    "stack.web.guards", "stack.web.inputs", "stack.web.ratelimit", "stack.web.serve", "stack.ledger.roster",
    "stack.web.answer_sink", "stack.web.write_behind", "stack.valkey_client", "stack.connection_stats",
    "stack.ledger.answer_keys", "stack.ledger.exam_rules", "stack.web.bounded_http",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_exact(name: str) -> None:
    module = importlib.import_module(name)
    declared = set(module.__all__)
    router = getattr(module, "router", None)
    endpoints = {route.endpoint for route in router.routes} if router is not None else set()  # exported via router
    defined_here = {
        attr for attr, value in vars(module).items()
        if not attr.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", None) == name and value not in endpoints
    }
    assert declared >= defined_here, f"public but not exported: {sorted(defined_here - declared)}"
    assert all(hasattr(module, attr) for attr in declared)
