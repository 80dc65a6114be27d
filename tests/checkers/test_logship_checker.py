"""chaos/checkers/logship.py on hand-written exports: each failing export puts its anomaly after
lines that were shipped correctly."""

from __future__ import annotations

from typing import Any

from chaos.checkers.base import UNKNOWN
from chaos.checkers.logship import RELP_WINDOW, LogshipOptions, check_logship
from chaos.ledgers import Ledgers

OPTIONS = LogshipOptions(log_canaries=("CANARY-A", "CANARY-C"))
FILE = "/run/logs/web_1.log"


def line(offset: int, msg: str = "ok", t: str = "2026-12-02T00:00:00.000000+00:00", received: float | None = None) -> dict[str, Any]:
    return {"id": offset + 1, "file": FILE, "offset": str(offset), "msg": msg, "line_time": t,
            "received_at": 1796169600.0 + 0.5 if received is None else received}


def exports(offsets: list[int], lines: list[dict], dropped: int = 0, counted: bool = True, resumed: int = 0,
            queued: int = 0) -> Ledgers:
    stats = {"name": "shipper", "counted": counted, "queued": queued, "shipped": len(lines), "dropped": dropped,
             "enqueued": len(offsets), "resumed": resumed}
    return Ledgers.from_exports(log_lines=lines, log_produced=[{"file": FILE, "offsets": offsets}], shipper_stats=[stats])


def test_shipped_plus_counted_drops_is_valid_and_the_delay_is_measured() -> None:
    result = check_logship([], exports([0, 10, 20, 30], [line(0), line(10)], dropped=2), OPTIONS)
    assert result.valid is True, result.to_dict()
    assert (result.counts["produced"], result.counts["shipped"], result.counts["dropped"]) == (4, 2, 2)
    assert result.details["delay"]["max"] == 0.5
    assert "produced 4 = shipped 2 + dropped (counted) 2" in result.notes[0]


def test_a_line_neither_shipped_nor_counted_is_an_uncounted_loss() -> None:
    result = check_logship([], exports([0, 10, 20, 30], [line(0), line(10)], dropped=1), OPTIONS)
    assert result.valid is False
    [loss] = result.examples["uncounted_loss"]
    assert loss["lines_neither_shipped_nor_counted"] == 1 and loss["first_missing"] == [f"{FILE}@20", f"{FILE}@30"]


def test_drops_without_counters_are_caught_as_uncounted_loss() -> None:
    result = check_logship([], exports([0, 10, 20], [line(0)], dropped=2, counted=False), OPTIONS)
    assert result.valid is False and result.counts["dropped"] == 0
    assert "the shipper kept no drop counters (impstats off)" in result.notes


def test_duplicates_within_relps_window_are_counted_but_allowed_and_beyond_it_are_not() -> None:
    offsets = list(range(0, 10 * (RELP_WINDOW + 2), 10))
    once = [line(o) for o in offsets]
    twice = once + [line(o) for o in offsets[: RELP_WINDOW]]
    ok = check_logship([], exports(offsets, twice), OPTIONS)
    assert ok.valid is True and ok.counts["duplicates"] == RELP_WINDOW
    too_many = check_logship([], exports(offsets, twice + [line(offsets[RELP_WINDOW])]), OPTIONS)
    assert too_many.valid is False and too_many.examples["excess_duplicates"][0]["allowed"] == RELP_WINDOW
    after_reconnect = check_logship([], exports(offsets, twice + [line(offsets[RELP_WINDOW])], resumed=1), OPTIONS)
    assert after_reconnect.valid is True  # one reconnect: a second window may be re-sent


def test_a_canary_after_clean_and_redacted_lines_is_leaked() -> None:
    lines = [line(0), line(10, "[redacted by the shipper: answer]"), line(20, 'answer {"content": "CANARY-C"}')]
    result = check_logship([], exports([0, 10, 20], lines), OPTIONS)
    assert result.valid is False and result.examples["canary_leaked"] == [{"file": FILE, "offset": "20", "canary": "CANARY-C"}]
    assert result.counts["redacted"] == 1


def test_lines_after_the_snapshot_are_counted_apart_not_as_produced() -> None:
    result = check_logship([], exports([0], [line(0), line(10)]), OPTIONS)
    assert result.valid is True and result.counts["after_snapshot"] == 1


def test_without_canaries_it_is_not_applicable_and_without_the_exports_unknown() -> None:
    assert check_logship([], Ledgers(), LogshipOptions()).na is not None
    assert check_logship([], Ledgers(), OPTIONS).valid == UNKNOWN


def test_options_round_trip_with_and_without_canaries() -> None:
    """scenario.json carries the option as a list, or null for a run that ships nothing."""
    assert LogshipOptions.from_dict({"log_canaries": ["CANARY-A"]}).log_canaries == ("CANARY-A",)
    assert LogshipOptions.from_dict({"log_canaries": None}).log_canaries is None
    assert LogshipOptions().to_dict() == {"log_canaries": None}
    assert OPTIONS.to_dict() == {"log_canaries": ["CANARY-A", "CANARY-C"]}


def test_exactly_one_line_lost_is_caught_and_at_most_five_are_named() -> None:
    offsets = list(range(0, 100, 10))
    one = check_logship([], exports(offsets, [line(o) for o in offsets[:-1]]), OPTIONS)
    assert one.valid is False and one.examples["uncounted_loss"][0]["lines_neither_shipped_nor_counted"] == 1
    many = check_logship([], exports(offsets, [line(o) for o in offsets[:3]]), OPTIONS)
    assert many.examples["uncounted_loss"][0]["first_missing"] == [f"{FILE}@{o}" for o in offsets[3:8]]


def test_a_counted_drop_of_a_line_written_after_the_snapshot_is_noted_never_a_loss() -> None:
    surplus = "more drop(s) or buffered line(s) counted than lines missing"
    over = check_logship([], exports([0, 10], [line(0), line(10)], dropped=1), OPTIONS)
    assert over.valid is True and any(f"1 {surplus}" in note for note in over.notes)
    exact = check_logship([], exports([0, 10], [line(0)], dropped=1), OPTIONS)
    assert exact.valid is True and not any(surplus in note for note in exact.notes), exact.notes


def test_lines_the_counters_show_still_buffered_are_delayed_not_lost_and_reported_apart() -> None:
    # rsyslog 8.2302 keeps a few lines in its queue's disk part until more traffic comes (#2646)
    offsets = [0, 10, 20, 30, 40]
    held = check_logship([], exports(offsets, [line(o) for o in offsets[:2]], dropped=1, queued=2), OPTIONS)
    assert held.valid is True, held.to_dict()
    assert held.counts["buffered"] == 2
    assert "shipped 2 + dropped (counted) 1 + still buffered (counted) 2" in held.notes[0]


def test_buffered_lines_excuse_no_more_than_the_counters_hold() -> None:
    offsets = [0, 10, 20, 30, 40]
    short = check_logship([], exports(offsets, [line(o) for o in offsets[:2]], dropped=1, queued=1), OPTIONS)
    assert short.valid is False
    assert short.examples["uncounted_loss"][0]["lines_neither_shipped_nor_counted"] == 1
    assert short.examples["uncounted_loss"][0]["still_buffered"] == 1
    # without counters the shipper's queue size is nobody's word: nothing is excused
    blind = check_logship([], exports(offsets, [line(o) for o in offsets[:2]], counted=False, queued=3), OPTIONS)
    assert blind.valid is False and blind.counts["buffered"] == 0


def test_without_counters_a_reconnect_buys_no_second_window() -> None:
    """The reconnect count comes from the same impstats counters: without them none is assumed."""
    offsets = list(range(0, 10 * (RELP_WINDOW + 2), 10))
    lines = [line(o) for o in offsets] + [line(o) for o in offsets[: RELP_WINDOW + 1]]
    result = check_logship([], exports(offsets, lines, counted=False, resumed=1), OPTIONS)
    assert result.valid is False and result.examples["excess_duplicates"][0]["allowed"] == RELP_WINDOW


def test_a_line_with_an_unreadable_time_is_skipped_and_the_later_ones_still_measured() -> None:
    lines = [line(0, t="not a time"), line(10, received=1796169600.0 + 2.0)]
    result = check_logship([], exports([0, 10], lines), OPTIONS)
    assert result.details["delay"]["max"] == 2.0 and result.details["delay"]["count"] == 1


def test_the_window_is_librelps_default() -> None:
    """The allowance assumes the shipper's RELP window; rsyslog's omrelp leaves librelp's default, 128."""
    assert RELP_WINDOW == 128
