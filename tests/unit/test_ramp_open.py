"""The open model and the distributed ramp without Locust: the arrival schedule, the slots'
claims, the generator gate, the corrected latency in the gate, the streamed-history checks and
the wire's helpers. Every criterion is shown failing on data built to break it, with the
anomaly after valid data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from chaos.analyze import EXIT_UNKNOWN, EXIT_VALID
from chaos.history import Op
from chaos.ramp.command import EXIT_LOAD_GATE, verdict_code
from chaos.ramp.gate import corrected_latency, gate, latency_quantiles
from chaos.ramp.generator import generator_gate, generator_steps, read_generators
from chaos.ramp.merge import merge_histories, stream_problems

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtests"))

from ramp_arrivals import ArrivalSchedule, GeneratorMeter, OpenArrivals, default_slots  # noqa: E402
from ramp_student import HistoryWriter  # noqa: E402
from ramp_wire import LineBuffer, StreamReceiver, partition_roster, token_matches  # noqa: E402


# ---------------------------------------------------------------- schedule
def test_uniform_schedule_offers_each_step_its_rate_exactly():
    offsets = list(ArrivalSchedule([10, 40], 2.0, "uniform", seed="s"))
    assert [sum(1 for a in offsets if a.step == s) for s in (0, 1)] == [20, 80]
    assert all(s * 2.0 <= a.offset < (s + 1) * 2.0 for a in offsets for s in [a.step])
    assert [a.number for a in offsets] == list(range(100))


def test_poisson_schedule_is_seeded_and_near_its_rate():
    first = [a.offset for a in ArrivalSchedule([200], 20.0, "poisson", seed="7")]
    again = [a.offset for a in ArrivalSchedule([200], 20.0, "poisson", seed="7")]
    other = [a.offset for a in ArrivalSchedule([200], 20.0, "poisson", seed="8")]
    assert first == again and first != other
    assert 3600 <= len(first) <= 4400  # 4000 expected; Poisson sd 63, so this is > 6 sd wide
    assert first == sorted(first)


def test_a_worker_share_scales_the_rate():
    assert len(list(ArrivalSchedule([40], 5.0, "uniform", seed="s", share=0.5))) == 100


def test_bad_distribution_names_the_option():
    with pytest.raises(ValueError, match="--ramp-distribution"):
        ArrivalSchedule([10], 1.0, "bursty", seed="s")


def test_default_slots_give_every_request_two_seconds_at_the_top_step():
    assert default_slots([25, 50, 500]) == 1000 and default_slots([1]) == 10


# ---------------------------------------------------------------- claims
def _arrivals(rates, step_seconds=1.0, max_lag=0.1, max_queue=5.0, origin=1000.0):
    meter = GeneratorMeter(step_seconds, len(rates), origin=origin)
    return OpenArrivals(ArrivalSchedule(rates, step_seconds, "uniform", seed="s"), meter, max_lag, max_queue)


def test_a_free_slot_claims_ahead_and_a_busy_pool_queues(monkeypatch):
    arrivals = _arrivals([10])
    monkeypatch.setattr("ramp_arrivals.time.monotonic", lambda: 1000.0)
    first, queued = arrivals.claim()
    assert (first.offset, queued) == (0.05, False)  # in the future: the slot sleeps until it
    monkeypatch.setattr("ramp_arrivals.time.monotonic", lambda: 1000.5)
    late, queued = arrivals.claim()
    assert queued is True  # its start (0.15) passed while no slot was free
    arrivals.sent(first, False, 0.0)
    arrivals.sent(late, queued, 0.35)
    counts = arrivals.meter.counts[0]
    assert (counts.scheduled, counts.sent, counts.queued, counts.delayed, counts.late) == (2, 2, 1, 1, 0)


def test_an_arrival_queued_past_the_bound_is_dropped_and_the_end_drops_what_is_left(monkeypatch):
    arrivals = _arrivals([10], max_queue=0.3)
    monkeypatch.setattr("ramp_arrivals.time.monotonic", lambda: 1000.5)
    arrival, _ = arrivals.claim()
    assert arrival.number == 2  # 0.05 and 0.15 waited > 0.3 s: dropped, never sent
    arrivals.close(now=1000.8)  # 0.25 .. 0.75 were due and never claimed
    counts = arrivals.meter.counts[0]
    assert (counts.scheduled, counts.dropped) == (8, 7)


def test_a_send_that_lags_with_a_slot_free_is_late(monkeypatch):
    arrivals = _arrivals([10])
    monkeypatch.setattr("ramp_arrivals.time.monotonic", lambda: 1000.0)
    arrival, queued = arrivals.claim()
    arrivals.sent(arrival, queued, 0.25)  # the CPU woke the slot 0.25 s late (> 0.1)
    assert (arrivals.meter.counts[0].delayed, arrivals.meter.counts[0].late) == (1, 1)


# ---------------------------------------------------------------- generator gate
def _config(slots=8, lag=0.025, limit=0.01, mode="open"):
    return {"arrivals": {"mode": mode, "distribution": "poisson", "slots": slots, "max_send_lag": lag,
                         "max_send_lag_given": False, "max_queue": 10.0},
            "gate": {"p99": 0.25, "max_failure_ratio": 0.0, "min_rate_ratio": 0.0, "max_delayed_ratio": limit}}


def _summary(*steps):
    return {"steps": [dict(scheduled=s, sent=s - d, queued=q, delayed=dl, late=0, dropped=d, completed=s - d,
                           cpu_seconds=0.5, wall_seconds=10.0, max_lag=0.0) for s, q, dl, d in steps]}


def test_generator_gate_holds_when_nothing_was_dropped_or_delayed_past_the_share():
    rows = generator_steps([_summary((100, 0, 0, 0), (200, 3, 1, 0))], 2)
    verdict = generator_gate(_config(), rows)
    assert verdict["passed"] is True and verdict["delayed"] == 1
    assert rows[1]["cpu_ms_per_request"] == 2.5 and rows[1]["busy_share"] == 0.05


def test_generator_gate_fails_on_one_dropped_arrival_after_a_clean_step():
    rows = generator_steps([_summary((100, 0, 0, 0), (200, 0, 0, 1))], 2)
    assert generator_gate(_config(), rows)["passed"] is False


def test_generator_gate_fails_when_delayed_arrivals_pass_the_share():
    rows = generator_steps([_summary((100, 0, 0, 0)), _summary((100, 0, 0, 0), (200, 40, 4, 0))], 2)
    verdict = generator_gate(_config(), rows)  # 4 of 400 = 0.01: at the limit, holds
    assert verdict["passed"] is True
    rows = generator_steps([_summary((100, 0, 0, 0), (200, 40, 5, 0))], 2)
    assert generator_gate(_config(), rows)["passed"] is False  # 5 of 300


def test_generator_gate_does_not_apply_to_the_closed_model():
    assert generator_gate(_config(mode="closed"), [])["applies"] is False


def test_an_unreadable_generator_summary_is_a_problem(tmp_path):
    (tmp_path / "histories").mkdir()
    (tmp_path / "histories" / "generator-local-1.json").write_text("{torn")
    assert read_generators(tmp_path)[1]


def test_a_short_generator_makes_the_verdict_unknown_never_a_pass_or_a_load_failure():
    criteria = [{"passed": True}]
    assert verdict_code(True, [], criteria, generator_kept_up=True) == EXIT_VALID
    assert verdict_code(True, [], criteria, generator_kept_up=False) == EXIT_UNKNOWN
    assert verdict_code(True, [], [{"passed": False}], generator_kept_up=False) == EXIT_UNKNOWN
    assert verdict_code(True, [], [{"passed": False}], generator_kept_up=True) == EXIT_LOAD_GATE


# ---------------------------------------------------------------- corrected latency
def _done(index, latency, corrected=None):
    extra = {"wall": 1000.0 + index}
    if corrected is not None:
        extra.update(intended=999.0 + index, corrected_latency=corrected)
    return Op(index=index, time=float(index), process=index, type="ok", f="answer", status=200, latency=latency,
              extra=extra)


def test_open_gate_judges_the_corrected_p99_and_a_stall_hidden_from_the_service_time_fails_it():
    fast = [_done(i, 0.01, 0.012) for i in range(98)]
    stalled = [_done(98 + i, 0.01, 2.0) for i in range(2)]  # sent late: quick to serve, slow for the student
    closed = {"gate": _config()["gate"], "arrivals": {"mode": "closed"}}
    assert gate(closed, [], fast + stalled)[0]["passed"] is True  # the service time sees nothing
    assert gate(_config(), [], fast)[0]["passed"] is True
    assert gate(_config(), [], fast + stalled)[0]["passed"] is False
    assert latency_quantiles(fast + stalled, corrected=True)["p99"] == 2.0


def test_a_history_without_intended_starts_is_read_with_its_service_time():
    old = _done(0, 0.2)
    assert corrected_latency(old) == 0.2
    assert gate(_config(), [], [old])[0]["measured"] == 0.2


def test_merge_keeps_the_intended_start_and_reads_old_lines_beside_new(tmp_path):
    folder = tmp_path / "histories"
    old = HistoryWriter(folder / "history-local-1.jsonl")
    old.append(0, "invoke", "session", {"student_id": "s1"})
    old.append(0, "ok", "session", {"student_id": "s1"}, status=201, latency=0.01)
    new = HistoryWriter(folder / "history-local-2.jsonl")
    new.append(0, "invoke", "session", {"student_id": "s2"}, intended=123.5)
    new.append(0, "ok", "session", {"student_id": "s2"}, status=201, latency=0.01, intended=123.5,
               corrected_latency=0.5)
    old.close()
    new.close()
    merged = merge_histories(tmp_path)
    assert merged.problems == []
    lines = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert sorted(line.get("corrected_latency", 0) for line in lines) == [0, 0, 0, 0.5]
    assert sum(1 for line in lines if "intended" in line) == 2


# ---------------------------------------------------------------- the wire
def test_the_token_is_compared_whole_and_nothing_else_passes():
    assert token_matches("abc", "abc")
    assert not token_matches("abd", "abc") and not token_matches(None, "abc") and not token_matches("", "")
    assert not token_matches({"token": "abc"}, "abc")


def test_roster_parts_are_disjoint_and_cover_the_roster():
    roster = {f"s{i:02d}": f"c{i}" for i in range(11)}
    parts = [partition_roster(roster, w, 3) for w in range(3)]
    assert sum(len(p) for p in parts) == 11 and set().union(*parts) == set(roster)
    assert not set(parts[0]) & set(parts[1])


def _stream(tmp_path, lines=450, send_end=True, drop_batch=None):
    receiver = StreamReceiver(tmp_path, expected=1)
    receiver.open("client-a", 0, 4242, "host-a")
    buffer = LineBuffer()
    writer = HistoryWriter(sink=buffer)
    for i in range(lines // 2):
        writer.append(i, "invoke", "answer", {})
        writer.append(i, "ok", "answer", {}, status=201, latency=0.01)
    while (batch := buffer.take()) is not None:
        assert len(batch["lines"]) <= 200
        if batch["seq"] != drop_batch:
            receiver.batch("client-a", batch)
    receiver.batch("client-stranger", {"seq": 0, "lines": ['{"x": 1}']})  # not accepted: never written
    if send_end:
        receiver.finish("client-a", {"batches": buffer.batches, "lines": buffer.lines, "counts": writer.counts,
                                     "in_flight_left": 0})
    receiver.write_manifest()
    return tmp_path / "histories"


def test_a_whole_stream_has_no_problem_and_sent_equals_received(tmp_path):
    folder = _stream(tmp_path)
    assert stream_problems(folder) == []
    worker = json.loads((folder / "streams.json").read_text())["workers"][0]
    assert worker["received"]["counts"] == {"answer invoke": 225, "answer ok": 225} == worker["end"]["counts"]
    assert len((folder / "history-worker0-4242.jsonl").read_text().splitlines()) == 450


def test_a_stream_without_its_end_names_the_worker(tmp_path):
    problems = stream_problems(_stream(tmp_path, send_end=False))
    assert len(problems) == 1 and "worker0 (pid 4242 on host-a" in problems[0] and "no end of history" in problems[0]


def test_a_lost_batch_is_a_gap_and_a_count_that_differs(tmp_path):
    problems = stream_problems(_stream(tmp_path, drop_batch=1))
    assert any("batches missing" in p for p in problems) and any("differ" in p for p in problems)


def test_fewer_accepted_workers_than_expected_is_a_problem(tmp_path):
    folder = tmp_path / "histories"
    folder.mkdir()
    (folder / "streams.json").write_text(json.dumps({"expected": 2, "workers": []}))
    assert "0 of 2 expected workers" in stream_problems(folder)[0]


def test_a_local_run_has_no_stream_to_judge(tmp_path):
    assert stream_problems(tmp_path) == []


def test_proctor_ramp_finds_the_locustfile_from_its_package():
    from chaos.ramp.command import LOCUSTFILE

    assert LOCUSTFILE.is_file(), LOCUSTFILE  # chaos/ramp/command.py moved one folder down in #20
