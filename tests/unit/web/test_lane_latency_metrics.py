"""``proctor_lane_latency_seconds``: finish -> outcome per lane, a histogram built from the ledger (#12)."""

from __future__ import annotations

from sqlalchemy import Engine, update
from web_support import ADMIN, TestClient, answer, auth, start, token_for

from stack.ledger.schema import outbox


def _finish_one(client: TestClient) -> str:
    token = token_for(client, "s-9")
    attempt = start(client, token)
    answer(client, token, attempt, "q1", "B", key="k1")
    client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token))
    return attempt


def _done_after(ledger: Engine, op: str, seconds: float) -> None:
    with ledger.begin() as conn:
        conn.execute(update(outbox).where(outbox.c.operation_id == op)
                     .values(status="done", created_at=1000.0, done_at=1000.0 + seconds))


def _samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("proctor_lane_latency_seconds")}


def test_each_done_row_lands_in_its_lanes_bucket_and_pending_rows_in_none(app_client: TestClient, admin_client, ledger: Engine) -> None:
    attempt = _finish_one(app_client)
    _done_after(ledger, f"merit-{attempt}", 0.3)
    _done_after(ledger, f"narrative-{attempt}", 40.0)  # the sms row stays pending: no latency yet
    samples = _samples(admin_client.get("/metrics", headers={"X-Admin-Token": ADMIN}).text)
    merit, ai = 'kind="merit",lane="merit"', 'kind="narrative",lane="ai"'
    assert samples[f'proctor_lane_latency_seconds_bucket{{{merit},le="0.25"}}'] == 0
    assert samples[f'proctor_lane_latency_seconds_bucket{{{merit},le="0.5"}}'] == 1
    assert samples[f'proctor_lane_latency_seconds_bucket{{{ai},le="30"}}'] == 0
    assert samples[f'proctor_lane_latency_seconds_bucket{{{ai},le="60"}}'] == 1
    assert samples[f'proctor_lane_latency_seconds_bucket{{{ai},le="+Inf"}}'] == 1
    assert abs(samples[f"proctor_lane_latency_seconds_sum{{{ai}}}"] - 40.0) < 1e-6
    assert not any('kind="sms"' in name for name in samples)
