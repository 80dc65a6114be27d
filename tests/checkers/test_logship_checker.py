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


def exports(offsets: list[int], lines: list[dict], dropped: int = 0, counted: bool = True, resumed: int = 0) -> Ledgers:
    stats = {"name": "shipper", "counted": counted, "queued": 0, "shipped": len(lines), "dropped": dropped,
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
