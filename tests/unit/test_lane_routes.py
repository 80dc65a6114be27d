"""PROCTOR_SHARED_LANE picks the whole kind -> queue table once (stack.lanes.queues.lane_routes)."""

from __future__ import annotations

import pytest

from stack.config import Settings, SettingsError, load_settings
from stack.lanes.queues import LANE_OF_KIND, lane_routes


def test_by_default_each_kind_has_its_own_lane() -> None:
    routes = lane_routes(Settings())
    assert routes is LANE_OF_KIND
    assert len(set(routes.values())) == 3


def test_the_negative_control_puts_ai_jobs_in_the_merit_queue() -> None:
    routes = lane_routes(load_settings({"PROCTOR_SHARED_LANE": "on"}))
    assert routes["narrative"] == routes["merit"] == "merit"
    assert routes["sms"] == "sms"


def test_a_bad_value_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="PROCTOR_SHARED_LANE"):
        load_settings({"PROCTOR_SHARED_LANE": "sometimes"})


def test_the_setting_reaches_child_processes() -> None:
    assert Settings().with_overrides(shared_lane=True).to_env()["PROCTOR_SHARED_LANE"] == "on"


def test_a_job_ids_enqueue_number_reads_back_from_the_id() -> None:
    """The hand-backs (stack/ledger/outbox.py ``_held_by``) compare it with the row's attempts."""
    from stack.ledger.outbox import enqueue_number_of
    from stack.lanes.queues import job_id

    assert enqueue_number_of(job_id("narrative-a-1-b", 12)) == 12
