"""Well-formedness of a history (chaos/wellformed.py): one hand-written failing history per rule.

Every failing history is the same valid prefix (two clients, an info and its retry on a new
process, a fault window, monitor samples, an invoke still outstanding at the end) followed
by the anomaly, so a rule whose scan stopped early would miss it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from chaos.analyze import EXIT_UNKNOWN, EXIT_VALID, check_command
from chaos.history import HistoryFormatError, read_history
from chaos.wellformed import CLIENT_FUNCTIONS, first_malformed

ROOT = Path(__file__).resolve().parents[2]
ANSWER = {"attempt_id": "a1", "question": "q1", "content": "B", "idempotency_key": "k1"}
START = {"student_id": "s2", "idempotency_key": "start-s2"}
FAULT = {"fault_id": 0, "kind": "kill", "target": "worker_merit_1", "at": 0.3, "duration": 0.5}


def op(index: int, time: float, process: Any, type_: str, f: str, value: Any = None, **extra: Any) -> dict[str, Any]:
    return {"index": index, "time": time, "process": process, "type": type_, "f": f, "value": value, **extra}


VALID_PREFIX = [
    op(0, 0.1, 0, "invoke", "session", {"student_id": "s1"}),
    op(1, 0.2, 1, "invoke", "session", {"student_id": "s2"}),
    op(2, 0.3, 0, "ok", "session", {"student_id": "s1"}, status=201),
    op(3, 0.4, "nemesis", "info", "fault-start", FAULT),
    op(4, 0.5, "monitor", "info", "sample", {"lanes": {}}),
    op(5, 0.6, 1, "ok", "session", {"student_id": "s2"}, status=201),
    op(6, 0.7, 0, "invoke", "answer", ANSWER),
    op(7, 0.8, 0, "info", "answer", ANSWER, error="ReadTimeout"),
    op(8, 0.9, 2, "invoke", "answer", ANSWER),  # the retry, as a new process
    op(9, 1.0, "nemesis", "info", "fault-end", {**FAULT, "restarted": True}),
    op(10, 1.0, 2, "ok", "answer", {**ANSWER, "superseded": False}, status=201),  # a completion may add fields
    op(11, 1.1, 1, "invoke", "start", START, intended_start=1.05),  # unknown extra fields pass
]
"""Lines 1-12; the invoke of line 12 is still outstanding when the history ends (allowed)."""

ANOMALIES = {
    # rule, anomaly (line 13), words the description must hold
    "completion without invoke": ("completion", op(12, 1.2, 0, "ok", "answer", ANSWER), "follows no invoke"),
    "completion of another function": ("completion", op(12, 1.2, 1, "ok", "finish", START), "function 'finish'"),
    "completion with an altered value": ("completion", op(12, 1.2, 1, "ok", "start", {**START, "idempotency_key": "x"}),
                                         "['idempotency_key']"),
    "completion dropping a value field": ("completion", op(12, 1.2, 1, "fail", "start", {"student_id": "s2"}),
                                          "['idempotency_key']"),
    "completion with a different scalar value": ("completion", op(12, 1.2, 1, "ok", "start", "s2"), "value differs"),
    "second outstanding invoke": ("one invoke per process", op(12, 1.2, 1, "invoke", "answer", ANSWER),
                                  "still outstanding"),
    "duplicate index": ("index", op(11, 1.2, 3, "invoke", "session", {"student_id": "s3"}), "index 11 does not follow"),
    "index going back": ("index", op(4, 1.2, 3, "invoke", "session", {"student_id": "s3"}), "index 4 does not follow"),
    "time going back": ("time", op(12, 1.05, 3, "invoke", "session", {"student_id": "s3"}), "runs backwards"),
    "time not finite": ("time", op(12, float("nan"), 3, "invoke", "session", {"student_id": "s3"}), "not a finite"),
    "unknown client function": ("function", op(12, 1.2, 3, "invoke", "delete_all", {}), "'delete_all'"),
    "unknown harness kind": ("function", op(12, 1.2, "monitor", "info", "heartbeat", {}), "'heartbeat'"),
    "harness kind by the wrong process": ("function", op(12, 1.2, "monitor", "info", "fault-start", FAULT),
                                          "not a harness op"),
    "harness kind by a client": ("function", op(12, 1.2, 3, "info", "sample", {}), "not a harness op"),
    "harness op that is not info": ("function", op(12, 1.2, "nemesis", "invoke", "fault-end", FAULT),
                                    "not a harness op"),
    "unknown process": ("process", op(12, 1.2, "attacker", "invoke", "session", {}), "'attacker'"),
    "client process that is a string": ("process", op(12, 1.2, "3", "invoke", "session", {}), "'3'"),
    "fault-end without a fault-start": ("fault", op(12, 1.2, "nemesis", "info", "fault-end", {**FAULT, "fault_id": 7}),
                                        "fault 7 follows no open"),
    "fault-end after its fault already ended": ("fault", op(12, 1.2, "nemesis", "info", "fault-end", FAULT),
                                                "fault 0 follows no open"),
    "fault op without a fault_id": ("fault", op(12, 1.2, "nemesis", "info", "fault-start", {"kind": "kill"}),
                                    "no fault_id"),
    "fault op whose value is not an object": ("fault", op(12, 1.2, "nemesis", "info", "fault-end", [0]), "no fault_id"),
}


def write(path: Path, ops: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in ops))
    return path


def test_the_valid_prefix_is_well_formed(tmp_path: Path) -> None:
    read = read_history(write(tmp_path / "h.jsonl", VALID_PREFIX))
    assert first_malformed(read.file_order) is None
    assert [number for number, _ in read.file_order] == list(range(1, 13))


@pytest.mark.parametrize("name", sorted(ANOMALIES))
def test_each_rule_names_the_first_bad_line(tmp_path: Path, name: str) -> None:
    rule, anomaly, words = ANOMALIES[name]
    tail = op(13, 5.0, 9, "invoke", "session", {"student_id": "s9"})  # valid on its own: the first bad line is named
    read = read_history(write(tmp_path / "h.jsonl", [*VALID_PREFIX, anomaly, tail]))
    malformed = first_malformed(read.file_order)
    assert malformed is not None and (malformed.line, malformed.rule) == (13, rule)
    assert words in malformed.describe() and malformed.describe().startswith(f"line 13 is not well-formed ({rule})")


def test_a_fault_id_may_be_used_again_once_its_fault_ended(tmp_path: Path) -> None:
    again = [op(12, 1.2, "nemesis", "info", "fault-start", FAULT), op(13, 1.3, "nemesis", "info", "fault-end", FAULT)]
    assert first_malformed(read_history(write(tmp_path / "h.jsonl", [*VALID_PREFIX, *again])).file_order) is None
    reused = [op(12, 1.2, "nemesis", "info", "fault-start", FAULT), op(13, 1.3, "nemesis", "info", "fault-start", FAULT)]
    malformed = first_malformed(read_history(write(tmp_path / "h.jsonl", [*VALID_PREFIX, *reused])).file_order)
    assert malformed is not None and (malformed.line, malformed.rule) == (14, "fault")
    assert "still open" in malformed.detail


def test_a_process_may_invoke_again_after_its_completion(tmp_path: Path) -> None:
    more = [op(12, 1.2, 0, "invoke", "finish", {"attempt_id": "a1"}), op(13, 1.3, 0, "fail", "finish", {"attempt_id": "a1"}),
            op(14, 1.3, 0, "invoke", "merit_card", {"attempt_id": "a1"})]
    assert first_malformed(read_history(write(tmp_path / "h.jsonl", [*VALID_PREFIX, *more])).file_order) is None


def test_a_misplaced_line_is_found_in_file_order_although_index_order_hides_it(tmp_path: Path) -> None:
    # The ok of line 3 moved before its invoke: sorted by index (as read_history's ops are) it looks right.
    moved = [VALID_PREFIX[2], *VALID_PREFIX[:2], *VALID_PREFIX[3:]]
    read = read_history(write(tmp_path / "h.jsonl", moved))
    assert [o.index for o in read.ops] == list(range(12))
    assert first_malformed(enumerate(read.ops, start=1)) is None  # what a check after sorting would see
    malformed = first_malformed(read.file_order)
    assert malformed is not None and (malformed.line, malformed.rule) == (1, "completion")


@pytest.mark.parametrize("field,value", [("index", 12.5), ("index", True), ("index", "12"), ("time", "1.2"),
                                         ("time", None), ("type", "maybe")])
def test_the_reader_refuses_a_line_whose_index_time_or_type_is_not_one(tmp_path: Path, field: str, value: Any) -> None:
    anomaly = {**op(12, 1.2, 3, "invoke", "session", {}), field: value}
    path = write(tmp_path / "h.jsonl", [*VALID_PREFIX, anomaly, op(13, 5.0, 9, "invoke", "session", {})])
    with pytest.raises(HistoryFormatError, match=r"h\.jsonl:13: "):
        read_history(path)


def test_proctor_check_calls_a_malformed_history_unknown_naming_the_line(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown even where the checkers would say valid: the history is not judged at all."""
    from tests.unit.test_analyze import build_run

    build_run(tmp_path)
    assert check_command(tmp_path, plots=False) == EXIT_VALID
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    # A completion nobody invoked, after every valid op.
    extra = op(last["index"] + 1, last["time"] + 0.1, 1, "ok", "finish", {"attempt_id": "a1", "idempotency_key": "f1"})
    (tmp_path / "history.jsonl").write_text("\n".join(lines + [json.dumps(extra)]) + "\n")
    capsys.readouterr()
    assert check_command(tmp_path, plots=False) == EXIT_UNKNOWN
    out = capsys.readouterr().out
    assert f"line {len(lines) + 1} is not well-formed (completion)" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report["checkers"]) == ["history"]  # no checker judged it


CONSTANTS = {"REVISE": "revise", "READ_ANSWERS": "read_answers", "ANSWER": "answer"}
"""The op-name constants a workload may pass to Call (chaos/ops/); test_op_name_constants checks their values."""


def test_op_name_constants() -> None:
    from chaos.ops.answers import ANSWER
    from chaos.ops.revisions import READ_ANSWERS, REVISE

    assert CONSTANTS == {"REVISE": REVISE, "READ_ANSWERS": READ_ANSWERS, "ANSWER": ANSWER}


def _call_names(path: Path) -> set[str]:
    """The first argument of every Call(...) in a workload file."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Call" and node.args:
            first = node.args[0]
            names.add(first.value if isinstance(first, ast.Constant) else CONSTANTS[first.id])
    return names


def test_client_functions_are_the_requests_the_workloads_send() -> None:
    from chaos.ops.revisions import READ_ANSWERS, REVISE

    chaos_names = _call_names(ROOT / "chaos" / "load" / "exam.py") | _call_names(ROOT / "chaos" / "ops" / "revisions.py")
    assert {REVISE, READ_ANSWERS} <= chaos_names
    ramp = ast.parse((ROOT / "loadtests" / "ramp_student.py").read_text())
    [next_call] = [n for n in ast.walk(ramp) if isinstance(n, ast.FunctionDef) and n.name == "_next_call"]
    firsts = [ret.value.elts[0] for ret in ast.walk(next_call) if isinstance(ret, ast.Return)
              and isinstance(ret.value, ast.Tuple)]
    ramp_names = {f.value if isinstance(f, ast.Constant) else CONSTANTS[f.id] for f in firsts}
    assert chaos_names | ramp_names == CLIENT_FUNCTIONS
