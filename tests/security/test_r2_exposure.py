"""Round two, finding 9 (low): information exposure.

``/metrics`` (28 KB), ``/docs``, ``/redoc`` and ``/openapi.json`` were public through HAProxy;
a 404 echoed the question path segment (3 KB of ``<img…>`` under a JSON content type);
another student's attempt id answered 403 where an unknown one answered 404. (``Server:
uvicorn`` needs a served node: tests/security/test_r2_real_stack.py.)
"""

from __future__ import annotations

import uuid
from pathlib import Path

from r2_node import running_node
from web_support import ADMIN, auth

PAYLOAD = "<img src=x onerror=alert(1)>" * 100


def test_metrics_and_the_api_docs_are_on_the_admin_listener_only(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        for path in ("/metrics", "/docs", "/redoc", "/openapi.json"):
            assert node.client.get(path).status_code == 404, path
        # Control: the operator still has them, on the admin listener.
        assert node.admin.get("/metrics").status_code == 403  # the admin listener alone is no credential
        assert "proctor_http_requests_total" in node.admin.get("/metrics", headers={"X-Admin-Token": ADMIN}).text
        assert node.admin.get("/docs").status_code == 200
        assert "/v1/sessions" in node.admin.get("/openapi/public.json").json()["paths"]


def test_error_bodies_never_echo_the_path(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        token = node.token("r2-01")
        attempt = node.client.post("/v1/attempts", headers=auth(token)).json()["attempt_id"]
        reply = node.client.put(f"/v1/attempts/{attempt}/answers/{PAYLOAD}", json={"content": "A"},
                                headers=auth(token) | {"Idempotency-Key": "k1"})
        assert reply.status_code == 404
        assert "<img" not in reply.text and len(reply.content) < 200
        for probe in (f"/v1/{PAYLOAD}", f"/v1/attempts/{PAYLOAD}/answers"):
            other = node.client.get(probe, headers=auth(token))
            assert other.status_code == 404 and "<img" not in other.text, probe


def test_another_students_attempt_is_as_unknown_as_a_made_up_one(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        victim, attacker = node.token("r2-01"), node.token("r2-02")
        victims = node.client.post("/v1/attempts", headers=auth(victim)).json()["attempt_id"]
        for path in ("/v1/attempts/{}/merit-card", "/v1/attempts/{}/answers", "/v1/attempts/{}/narrative"):
            real = node.client.get(path.format(victims), headers=auth(attacker))
            made_up = node.client.get(path.format(uuid.uuid4().hex), headers=auth(attacker))
            assert (real.status_code, real.json()) == (made_up.status_code, made_up.json()) == (404, {"detail": "unknown attempt"})
        # Control: the victim's own token reaches it.
        assert node.client.get(f"/v1/attempts/{victims}/answers", headers=auth(victim)).status_code == 200
