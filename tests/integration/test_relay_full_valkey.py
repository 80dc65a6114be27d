"""The relay against a full Valkey (noeviction, maxmemory reached; issue #25, memory pressure).

A real valkey-server holds more than its ``maxmemory``: every write is refused with ``OOM``.
The relay's policy (``send_and_mark_policy``) decides what that costs: the product order
(Valkey first, then the ledger) leaves the row pending for a later pass; the negative control
(``relay_mark_early``: the ledger first) leaves a row marked enqueued for a job Valkey never held.
Each refusal is counted (``oom_refusals``) by the connection that read it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis
from redis.exceptions import OutOfMemoryError
from rq.job import Job

from stack.config import Settings
from stack.connection_stats import ConnectionStats, install_process_stats, process_stats
from stack.relay import ledger_then_valkey, send_and_mark_policy, valkey_then_ledger
from stack.valkey_client import valkey_client
from test_relay import relay, row, settings, valkey, valkey_port  # noqa: F401 - fixtures
from valkeysupport import filled_past_maxmemory

pytestmark = pytest.mark.integration

@pytest.fixture
def full_valkey(valkey: Redis) -> Iterator[Redis]:  # noqa: F811 - the fixture imported above
    """Valkey full under noeviction (valkeysupport.filled_past_maxmemory); emptied afterwards."""
    try:
        with filled_past_maxmemory(valkey, "filler:") as full:
            yield full
    finally:
        valkey.flushall()


@pytest.fixture
def counted() -> Iterator[ConnectionStats]:
    before = process_stats()
    stats = install_process_stats(ConnectionStats("relay"))
    yield stats
    install_process_stats(before)


def test_the_policy_is_chosen_once_from_the_setting(settings: Settings) -> None:  # noqa: F811
    assert send_and_mark_policy(settings) is valkey_then_ledger
    assert send_and_mark_policy(settings.with_overrides(relay_mark_early=True)) is ledger_then_valkey


def test_a_refused_enqueue_leaves_the_row_pending_and_is_counted(
    settings: Settings, full_valkey: Redis, counted: ConnectionStats  # noqa: F811
) -> None:
    client = valkey_client(settings, "queue")  # a counting connection, as the relay's own
    try:
        with pytest.raises(OutOfMemoryError):
            relay(settings, client).run_once()
    finally:
        client.close()
    assert row(settings, "merit-a1")["status"] == "pending"  # the next pass sends it again
    assert counted.snapshot()["events"].get("oom_refusals", 0) >= 1
    full_valkey.config_set("maxmemory", "0")  # freed: the next pass sends it
    assert relay(settings, full_valkey).run_once().enqueued == ["merit-a1"]
    assert full_valkey.exists(Job.key_for(row(settings, "merit-a1")["job_id"]))


def test_the_early_mark_control_points_a_row_at_a_job_valkey_never_held(
    settings: Settings, full_valkey: Redis  # noqa: F811
) -> None:
    early = settings.with_overrides(relay_mark_early=True, reconciler_enabled=False)
    with pytest.raises(OutOfMemoryError):
        relay(early, full_valkey).run_once()
    marked = row(settings, "merit-a1")
    assert marked["status"] == "enqueued" and marked["job_id"]
    assert not full_valkey.exists(Job.key_for(marked["job_id"]))  # lost: no later pass resends it
    full_valkey.config_set("maxmemory", "0")
    assert relay(early, full_valkey).run_once().enqueued == []
