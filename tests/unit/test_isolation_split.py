"""The isolation bench's split of a merit card's finish-to-ready time (loadtests/isolation_split.py),
on a hand-written run folder: the parts add up, the backlog's cards and unmatched jobs stay out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from isolation_split import PARTS, merit_split, split_summary  # noqa: E402


def _write(run_dir: Path, attempts: list[dict], outbox: list[dict], jobs: list[dict]) -> Path:
    (run_dir / "ledgers").mkdir(parents=True)
    (run_dir / "ledgers" / "attempts.json").write_text(json.dumps({"rows": attempts}))
    (run_dir / "ledgers" / "outbox.json").write_text(json.dumps({"rows": outbox}))
    (run_dir / "lane_jobs.json").write_text(json.dumps({"table": "lane_jobs", "exported_at": 200.0, "rows": jobs}))
    return run_dir


def _card(attempt: str, created: float, done: float | None) -> dict:
    return {"attempt_id": attempt, "kind": "merit", "job_id": f"merit-{attempt}-1", "created_at": created, "done_at": done}


def _job(attempt: str, enqueued: float, started: float | None, ended: float | None) -> dict:
    return {"job_id": f"merit-{attempt}-1", "enqueued_at": enqueued, "started_at": started, "ended_at": ended}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    attempts = [{"attempt_id": a, "exam_code": code} for a, code in
                (("a", "NOVA-101"), ("b", "NOVA-101"), ("seed", "BACKLOG-0001"), ("queued", "NOVA-101"))]
    outbox = [_card("a", 100.0, 100.5), _card("b", 101.0, 101.2), _card("seed", 90.0, 90.1),
              _card("queued", 102.0, None),
              {"attempt_id": "a", "kind": "narrative", "job_id": "narrative-a-1", "created_at": 100.0, "done_at": 150.0}]
    jobs = [_job("a", 100.1, 100.3, 100.6), _job("b", 101.05, 101.1, 101.25), _job("seed", 90.0, 90.05, 90.1),
            _job("queued", 102.1, None, None)]
    return _write(tmp_path / "run", attempts, outbox, jobs)


def test_each_exam_card_splits_into_parts_that_add_up(run_dir: Path) -> None:
    cards = merit_split(run_dir)
    assert len(cards) == 2  # not the backlog's card, not the card still queued, not the narrative
    first = cards[0]
    assert first["dispatch"] == pytest.approx(0.1) and first["pickup"] == pytest.approx(0.2)
    assert first["execution"] == pytest.approx(0.2) and first["finish"] == pytest.approx(0.1)
    for card in cards:  # dispatch + pickup + execution is finish-to-ready; "finish" comes after it
        assert card["dispatch"] + card["pickup"] + card["execution"] == pytest.approx(card["total"])


def test_the_summary_names_the_slowest_cards_parts(run_dir: Path) -> None:
    summary = split_summary(merit_split(run_dir))
    assert summary["cards"] == 2
    assert summary["total"]["max"] == pytest.approx(0.5) and summary["total"]["p50"] == pytest.approx(0.2)
    assert summary["slowest"]["pickup"] == pytest.approx(0.2)
    assert set(PARTS) <= set(summary["slowest"])
    assert split_summary([]) == {"cards": 0, **{part: {"p50": None, "p99": None, "max": None} for part in ("total", *PARTS)}}
