"""Finding 4 (medium): a token's exam was never checked; a NOVA-102 token answered and
finished a NOVA-101 attempt. Now a token carries student and exam and every attempt route
checks both."""

from __future__ import annotations

from web_support import TestClient, answer, auth, start, token_for


def test_a_token_of_another_exam_cannot_touch_the_attempt(app_client: TestClient) -> None:
    nova101 = token_for(app_client, "s-1", "NOVA-101")
    nova102 = token_for(app_client, "s-1", "NOVA-102")  # same student, other exam
    attempt = start(app_client, nova101)
    routes = [
        ("PUT", f"/v1/attempts/{attempt}/answers/q1", {"json": {"content": "A"}, "headers": {"Idempotency-Key": "k"}}),
        ("GET", f"/v1/attempts/{attempt}/merit-card", {}),
        ("GET", f"/v1/attempts/{attempt}/narrative", {}),
        ("POST", f"/v1/attempts/{attempt}/finish", {}),
    ]
    for method, path, extra in routes:
        headers = auth(nova102) | extra.pop("headers", {})
        response = app_client.request(method, path, headers=headers, **extra)
        assert response.status_code == 404 and response.json()["detail"] == "unknown attempt", path
    # Control: the right exam's token works on the same attempt.
    assert answer(app_client, nova101, attempt, "q1", "A").status_code == 201
    assert app_client.post(f"/v1/attempts/{attempt}/finish", headers=auth(nova101)).status_code == 202
