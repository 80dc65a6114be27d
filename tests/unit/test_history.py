"""chaos.history: the JSONL writer, loading (crash-tolerant), and pairing helpers."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import chaos.history as history_module
from chaos.history import (
    FaultWindow,
    History,
    HistoryFile,
    HistoryFormatError,
    Op,
    fault_windows,
    load_history,
    monitor_samples,
    pair_ops,
    read_history,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_all_is_exact() -> None:
    assert sorted(history_module.__all__) == sorted(
        [
            "CHURN_SAMPLE", "COMPLETION_TYPES", "DELIBERATE_DUPLICATE", "FAULT_END", "FAULT_START", "FaultWindow", "History", "HistoryFile",
            "HistoryFormatError", "NEMESIS", "MONITOR", "OP_KINDS", "Op", "SAMPLE", "VALKEY_SAMPLE",
            "client_ops", "fault_windows", "load_history", "monitor_samples", "pair_ops",
            "read_history", "TornLine", "write_history",
        ]
    )


def test_writes_one_json_object_per_line_in_the_documented_format(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "run" / "history.jsonl"
    with History(path, clock=clock) as history:
        clock.now += 1.2345
        history.append(process=3, type="invoke", f="answer", value={"attempt_id": "a1", "question": "q1"})
        clock.now += 0.0266
        history.append(
            process=3, type="ok", f="answer", value={"attempt_id": "a1"}, status=201, node="web_2",
            receipt_id="r1", latency=0.0266, error=None, key="extra-field",
        )
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"index": 0, "time": 1.2345, "process": 3, "type": "invoke", "f": "answer", "value": {"attempt_id": "a1", "question": "q1"}},
        {
            "index": 1, "time": 1.2611, "process": 3, "type": "ok", "f": "answer", "value": {"attempt_id": "a1"},
            "status": 201, "node": "web_2", "receipt_id": "r1", "latency": 0.0266, "key": "extra-field",
        },
    ]
    loaded = load_history(path)
    assert loaded[1].extra == {"key": "extra-field"}
    assert [op.to_dict() for op in loaded] == lines


def test_each_line_is_on_disk_before_close(tmp_path: Path) -> None:
    history = History(tmp_path / "h.jsonl")
    history.invoke(1, "finish", {"attempt_id": "a1"})
    assert len(load_history(tmp_path / "h.jsonl")) == 1  # a crash now would keep it
    history.close()
    with pytest.raises(ValueError, match="closed"):
        history.invoke(1, "finish")


def test_complete_keeps_process_and_f_and_measures_latency(tmp_path: Path) -> None:
    clock = FakeClock()
    with History(tmp_path / "h.jsonl", clock=clock) as history:
        clock.now += 1.0  # the invoke is not at time 0: latency is measured from it, not from the origin
        invoked = history.invoke(7, "answer", {"q": 1})
        clock.now += 0.25
        done = history.complete(invoked, "info", error="ReadTimeout")
        faults = history.nemesis("fault-start", {"fault_id": 1, "kind": "kill", "target": "web_1"})
        sample = history.sample({"lanes": {}})
    assert (done.process, done.f, done.value, done.latency, done.error) == (7, "answer", {"q": 1}, 0.25, "ReadTimeout")
    assert (faults.process, faults.type, sample.process, sample.f) == ("nemesis", "info", "monitor", "sample")
    assert history.counts() == {"invoke": 1, "info": 1}  # client ops only
    with History(tmp_path / "x.jsonl") as other, pytest.raises(ValueError, match="completion type"):
        other.complete(invoked, "invoke")


def test_concurrent_appends_get_dense_unique_indexes(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with History(path) as history:
        def worker(process: int) -> None:
            for _ in range(200):
                history.append(process=process, type="invoke", f="answer", value={"pad": "x" * 50})

        threads = [threading.Thread(target=worker, args=(p,)) for p in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    ops = load_history(path)
    assert [op.index for op in ops] == list(range(1600))
    times = [op.time for op in ops]
    assert times == sorted(times)  # index order and time order agree
    assert len({history.new_process() for _ in range(5)}) == 5


def line(index: int) -> str:
    return json.dumps({"index": index, "time": index / 10, "process": 1, "type": "invoke", "f": "answer", "value": None})


def test_torn_last_line_is_left_out_and_reported_with_line_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    # A blank line mid-file is skipped and reading goes on past it; the torn line comes last.
    path.write_text(line(0) + "\n\n" + line(1) + "\n" + line(2) + "\n" + '{"index": 3, "ti')
    read = read_history(path)
    assert [op.index for op in read.ops] == [0, 1, 2]
    assert read.torn is not None and (read.torn.line, read.torn.bytes) == (5, 16)
    assert read.torn.describe().startswith("line 5 is torn (16 bytes, JSONDecodeError")
    assert [op.index for op in load_history(path)] == [0, 1, 2]


def test_a_whole_history_has_no_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(line(0) + "\n\n" + line(1) + "\n")
    assert read_history(path) == HistoryFile([load_history(path)[0], load_history(path)[1]], None)


def test_a_bad_line_before_the_last_raises_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(line(0) + "\n" + '{"index": 1, "ti\n' + line(2) + "\n")
    with pytest.raises(HistoryFormatError, match=r"h.jsonl:2"):
        load_history(path)
    path.write_text(line(0) + "\n" + json.dumps({"index": 1, "time": 0, "process": 1, "type": "maybe", "f": "x"}) + "\n" + line(2) + "\n")
    with pytest.raises(HistoryFormatError, match="maybe"):
        load_history(path)


def op(index: int, process: int | str, type: str, f: str = "answer", time: float | None = None, value: object = None) -> Op:
    return Op(index=index, time=index / 10 if time is None else time, process=process, type=type, f=f, value=value)


def test_pair_ops_pairs_per_process_and_leaves_unfinished_invokes_open() -> None:
    ops = [
        op(0, 1, "invoke"),
        op(1, 2, "invoke", "finish"),
        op(2, "monitor", "info", "sample", value={"lanes": {}}),
        op(3, 2, "ok", "finish"),
        op(4, 1, "info"),
        op(5, 3, "invoke"),
    ]
    pairs = [(a.index, b.index if b else None) for a, b in pair_ops(ops)]
    assert pairs == [(0, 4), (1, 3), (5, None)]


def test_a_second_invoke_on_a_busy_process_leaves_the_first_unpaired() -> None:
    ops = [op(0, 1, "invoke"), op(1, 1, "invoke"), op(2, 1, "ok")]
    assert [(a.index, b.index if b else None) for a, b in pair_ops(ops)] == [(0, None), (1, 2)]


def test_fault_windows_pair_by_fault_id_and_keep_unhealed_faults() -> None:
    ops = [
        op(0, "nemesis", "info", "fault-start", value={"fault_id": 1, "kind": "kill", "target": "web_1"}),
        op(1, "nemesis", "info", "fault-start", value={"fault_id": 2, "kind": "pause", "target": "relay"}),
        op(2, "nemesis", "info", "fault-end", value={"fault_id": 1, "kind": "kill", "target": "web_1"}),
    ]
    assert fault_windows(ops) == [FaultWindow(1, "kill", "web_1", 0.0, 0.2), FaultWindow(2, "pause", "relay", 0.1, None)]
    assert monitor_samples(ops) == []


def test_a_fault_end_without_its_start_is_no_window() -> None:
    ops = [
        op(0, "nemesis", "info", "fault-end", value={"fault_id": 5, "kind": "kill", "target": "web_1"}),
        op(1, "nemesis", "info", "fault-start", value={"fault_id": 1, "kind": "kill", "target": "web_1"}),
        op(2, "nemesis", "info", "fault-end", value={"fault_id": 1, "kind": "kill", "target": "web_1"}),
    ]
    assert fault_windows(ops) == [FaultWindow(1, "kill", "web_1", 0.1, 0.2)]


def test_only_the_nemesis_opens_fault_windows() -> None:
    """A client op that happens to be called fault-start (any f is a client's to choose) is no fault."""
    ops = [
        op(0, "nemesis", "info", "fault-start", value={"fault_id": 1, "kind": "kill", "target": "web_1"}),
        op(1, "nemesis", "info", "fault-end", value={"fault_id": 1, "kind": "kill", "target": "web_1"}),
        op(2, 3, "invoke", "fault-start", value={"fault_id": 2, "kind": "kill", "target": "web_2"}),
    ]
    assert fault_windows(ops) == [FaultWindow(1, "kill", "web_1", 0.0, 0.1)]
