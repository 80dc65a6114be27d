"""The history writer's named op kinds, whole-file writes, the producers that use it,
and that a history written before the named kinds still reads."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import httpx
import pytest

from chaos.load.client import Call, ExamClient
from chaos.history import (
    CHURN_SAMPLE,
    FAULT_END,
    FAULT_START,
    MONITOR,
    NEMESIS,
    OP_KINDS,
    SAMPLE,
    VALKEY_SAMPLE,
    History,
    fault_windows,
    monitor_samples,
    pair_ops,
    read_history,
    write_history,
)
from chaos.nemesis.base import FaultSpec
from chaos.nemesis.runner import log_fault


def test_each_named_kind_is_written_by_its_own_process(tmp_path: Path) -> None:
    with History(tmp_path / "h.jsonl") as history:
        written = [
            history.fault_start({"fault_id": 0}), history.fault_end({"fault_id": 0}), history.sample({"lanes": {}}),
            history.churn_sample({"ops": 1}), history.valkey_sample({"ok": True}),
        ]
    assert [(op.process, op.type, op.f) for op in written] == [
        (NEMESIS, "info", FAULT_START), (NEMESIS, "info", FAULT_END), (MONITOR, "info", SAMPLE),
        (MONITOR, "info", CHURN_SAMPLE), (MONITOR, "info", VALKEY_SAMPLE),
    ]
    assert {op.f: op.process for op in written} == OP_KINDS  # every kind has its method, and no other kind exists
    assert history.counts() == {}  # harness ops are not client ops


def test_an_unnamed_kind_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with History(tmp_path / "h.jsonl") as history:
        history.invoke(1, "answer", {"q": 1})
        with pytest.raises(ValueError, match=r"'fault-begin' is not one of .*'fault-end'"):
            history.record("fault-begin", {})
        with pytest.raises(ValueError, match="nemesis op kind 'sample'"):
            history.nemesis(SAMPLE, {})
    assert len(read_history(tmp_path / "h.jsonl").ops) == 1  # a refused op writes nothing


def test_write_history_round_trips_private_and_replacing(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with History(path) as history:
        invoked = history.invoke(3, "answer", {"q": 1})
        history.complete(invoked, "ok", status=201, receipt_id="r1", wall=12.5)
        history.fault_start({"fault_id": 0, "kind": "kill", "target": "web_1"})
    ops = read_history(path).ops
    copy = tmp_path / "copy.jsonl"
    copy.write_text("stale line that must go\n")
    assert write_history(copy, ops) == 3
    assert copy.read_text() == path.read_text()  # one line format for the writer and for whole-file writes
    assert read_history(copy).ops == ops and ops[1].extra == {"wall": 12.5}
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600


OLD_RUN = [  # lines as the writer wrote them before the named kinds: the format on disk is unchanged
    {"index": 0, "time": 0.1, "process": 0, "type": "invoke", "f": "answer", "value": {"attempt_id": "a1"}},
    {"index": 1, "time": 0.2, "process": "nemesis", "type": "info", "f": "fault-start",
     "value": {"fault_id": 0, "kind": "kill", "target": "worker_merit_1", "at": 0.1, "duration": 1.0}},
    {"index": 2, "time": 0.3, "process": 0, "type": "ok", "f": "answer", "value": {"attempt_id": "a1"}, "status": 201,
     "latency": 0.2},
    {"index": 3, "time": 0.4, "process": "monitor", "type": "info", "f": "sample", "value": {"lanes": {}}},
    {"index": 4, "time": 1.3, "process": "nemesis", "type": "info", "f": "fault-end", "value": {"fault_id": 0}},
]


def test_a_history_from_before_the_named_kinds_reads_the_same(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in OLD_RUN))
    ops = read_history(path).ops
    assert [op.to_dict() for op in ops] == OLD_RUN
    assert [(w.fault_id, w.start, w.end) for w in fault_windows(ops)] == [(0, 0.2, 1.3)]
    assert [op.index for op in monitor_samples(ops)] == [3]
    assert [(inv.index, done.index) for inv, done in pair_ops(ops)] == [(0, 2)]


def test_log_fault_writes_the_fault_op_of_its_phase(tmp_path: Path) -> None:
    fault = FaultSpec(at=0.5, kind="kill", target="web_1", duration=1.0)
    with History(tmp_path / "h.jsonl") as history:
        log_fault(history, "start", 4, fault, {"pids": [41]})
        log_fault(history, "end", 4, fault, {"restarted": True})
        with pytest.raises(KeyError):
            log_fault(history, "middle", 4, fault, {})
    start, end = read_history(tmp_path / "h.jsonl").ops
    assert (start.process, start.f, start.value["fault_id"], start.value["pids"]) == (NEMESIS, FAULT_START, 4, [41])
    assert (end.f, end.value["restarted"]) == (FAULT_END, True)


def test_client_retries_an_unknown_outcome_as_a_new_process_from_the_writer(tmp_path: Path) -> None:
    statuses = iter([503, 201])

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(next(statuses), json={"receipt_id": "r1"}, headers={"x-proctor-node": "web_2"})

    async def run(history: History) -> tuple[int, int]:
        first = history.new_process()
        async with httpx.AsyncClient(transport=httpx.MockTransport(reply), base_url="http://127.0.0.1") as http:
            client = ExamClient(http, history, retry_delay=0)
            result = await client.call(first, Call("answer", "PUT", "/v1/x", {"q": 1}))
        return first, result.process

    with History(tmp_path / "h.jsonl") as history:
        first, last = asyncio.run(run(history))
    ops = read_history(tmp_path / "h.jsonl").ops
    assert [(op.process, op.type) for op in ops] == [(first, "invoke"), (first, "info"), (last, "invoke"), (last, "ok")]
    assert last != first and ops[3].receipt_id == "r1" and ops[3].node == "web_2" and ops[1].error == "{'receipt_id': 'r1'}"
    assert history.new_process() not in (first, last)  # one counter: the writer's
