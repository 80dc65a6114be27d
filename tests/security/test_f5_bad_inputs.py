"""Finding 5 (medium): a lone surrogate in answer content (UnicodeEncodeError in body_digest)
and non-ASCII bytes in Authorization (auth._sign's .encode("ascii")) gave 500s. Now the first
is a 422 naming the field and the second a 401. (The bounded schemathesis run in
test_schemathesis.py looks for any other input that gives a 5xx.)"""

from __future__ import annotations

import json

from web_support import ROSTER, TestClient, auth, start, token_for

SURROGATE_JSON = '{"content": "\\ud800"}'  # valid JSON, not encodable as UTF-8


def test_a_lone_surrogate_in_an_answer_is_a_422_naming_the_field(app_client: TestClient) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    response = app_client.put(f"/v1/attempts/{attempt}/answers/q1", content=SURROGATE_JSON,
                              headers=auth(token) | {"Idempotency-Key": "k1", "Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "content"]
    assert "\ud800" not in response.text and "\\ud800" not in response.text  # the input is not echoed


def test_surrogates_in_login_fields_are_422_not_500(app_client: TestClient) -> None:
    code = ROSTER["NOVA-101"]["s-1"]
    for field in ("student_id", "exam_code", "access_code"):
        body = {"student_id": "s-1", "exam_code": "NOVA-101", "access_code": code, field: "\ud800"}
        raw = json.dumps(body)  # ensure_ascii writes the lone surrogate as the JSON escape \ud800
        response = app_client.post("/v1/sessions", content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", field]


def test_non_ascii_authorization_is_a_401(app_client: TestClient) -> None:
    token = token_for(app_client)
    for bad in ("Bearer \xe9\xe9\xe9", f"Bearer {token}\xff", "Bearer v1.\xfc.\xfc"):
        response = app_client.post("/v1/attempts", headers={"Authorization": bad.encode("latin-1")})  # type: ignore[dict-item]
        assert response.status_code == 401, bad
    assert app_client.post("/v1/attempts", headers=auth(token)).status_code == 201  # control
