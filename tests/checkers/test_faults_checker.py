"""faults checker: the declared chaos happened, was logged as declared, and was healed."""

from __future__ import annotations

from typing import Any

import pytest
from checker_builders import HistoryBuilder

from chaos.checkers import CheckOptions
from chaos.checkers.base import UNKNOWN, OptionsError
from chaos.checkers.faults import check_faults
from chaos.ledgers import Ledgers

DECLARED = [
    {"at": 1.0, "kind": "kill", "target": "worker_merit_1", "duration": 0.5, "wait_busy": 1.0},
    {"at": 2.0, "kind": "kill", "target": "worker_sms_1", "duration": 0.5, "wait_busy": 1.0},
    {"at": 3.0, "kind": "pause", "target": "web_1", "duration": 1.0},
]


def options(declared: list[dict[str, Any]] | None = DECLARED) -> CheckOptions:
    return CheckOptions.from_scenario({"faults": declared} if declared is not None else {})


def played(skip: tuple[int, ...] = (), unhealed: tuple[int, ...] = (), **changes: dict[str, Any]) -> HistoryBuilder:
    """The nemesis log of DECLARED as chaos/nemesis/runner.py writes it, between client calls."""
    h = HistoryBuilder()
    h.call(1, "answer", {"attempt_id": "a1"})
    for fault_id, fault in enumerate(DECLARED):
        if fault_id in skip:
            continue
        value = {"fault_id": fault_id, **fault, "pids": [100 + fault_id], **changes.get(f"f{fault_id}", {})}
        h.op("nemesis", "info", "fault-start", value)
        h.call(1, "answer", {"attempt_id": "a1"})
        if fault_id not in unhealed:
            h.op("nemesis", "info", "fault-end", {"fault_id": fault_id, **fault, "restarted": True})
    return h


def check(h: HistoryBuilder, opts: CheckOptions | None = None) -> dict[str, Any]:
    return check_faults(h.ops, Ledgers(), opts or options()).to_dict()


def test_every_declared_fault_started_and_ended_is_valid() -> None:
    result = check(played())
    assert result["valid"] is True
    assert result["counts"] == {"declared": 3, "started": 3, "ended": 3, "not_injected": 0, "injection_failed": 0,
                                "mismatched": 0, "unhealed": 0, "undeclared": 0}


def test_a_fault_never_healed_is_invalid() -> None:
    result = check(played(unhealed=(2,)))
    assert result["violations"] == ["unhealed"]
    assert result["examples"]["unhealed"] == [{"fault_id": 2, "kind": "pause", "target": "web_1", "index": 10}]


def test_unhealed_is_invalid_even_without_a_declaration() -> None:
    result = check(played(unhealed=(1,)), options(None))
    assert result["valid"] is False and result["violations"] == ["unhealed"]


def test_declared_faults_that_never_happened_are_invalid() -> None:
    result = check(played(skip=(1, 2)))
    assert result["violations"] == ["not_injected"]
    assert [e["fault_id"] for e in result["examples"]["not_injected"]] == [1, 2]
    no_chaos = HistoryBuilder()
    no_chaos.call(1, "answer", {"attempt_id": "a1"})
    assert check(no_chaos)["counts"]["not_injected"] == 3


def test_a_fault_the_nemesis_could_not_inject_is_invalid() -> None:
    result = check(played(unhealed=(2,), f2={"error": "NemesisError: unknown target"}))
    assert result["violations"] == ["injection_failed"]  # and not also unhealed: it never started
    assert result["examples"]["injection_failed"][0]["error"] == "NemesisError: unknown target"


def test_a_fault_logged_otherwise_than_declared_is_mismatched() -> None:
    result = check(played(f1={"target": "worker_merit_1"}, f2={"duration": 0.1}))
    assert result["violations"] == ["mismatched"]
    assert [e["differs"] for e in result["examples"]["mismatched"]] == [
        {"target": {"declared": "worker_sms_1", "logged": "worker_merit_1"}},
        {"duration": {"declared": 1.0, "logged": 0.1}},
    ]


def test_fault_ops_no_declaration_explains_are_undeclared() -> None:
    h = played()
    h.op("nemesis", "info", "fault-start", {"fault_id": 9, "kind": "kill", "target": "relay"})
    h.op("nemesis", "info", "fault-end", {"fault_id": 9, "kind": "kill", "target": "relay"})
    h.op("nemesis", "info", "fault-end", {"fault_id": 1, "kind": "kill", "target": "worker_sms_1"})  # a second end
    result = check(h)
    assert result["violations"] == ["undeclared"]
    assert [(e["fault_id"], e["starts"], e["ends"]) for e in result["examples"]["undeclared"]] == [(1, 1, 2), (9, 1, 1)]


def test_no_declared_list_is_unknown() -> None:
    result = check(played(), options(None))
    assert result["valid"] == UNKNOWN
    assert result["notes"] == ['scenario.json declares no "faults" list: cannot tell whether the declared chaos happened']
    assert check(HistoryBuilder(), options([]))["valid"] is True  # declared: no faults, none happened


@pytest.mark.parametrize(
    "faults, match",
    [
        ({"at": 1}, "faults=.*expected a list"),
        (["kill"], r"faults\[0\]=.*expected an object"),
        ([{"at": 1, "kind": "kill", "duration": 1}], r"faults\[0\].target=None: expected a string"),
        ([{"at": "soon", "kind": "kill", "target": "x", "duration": 1}], r"faults\[0\].at='soon'"),
        ([{"at": 1, "kind": "kill", "target": "x", "duration": True}], r"faults\[0\].duration=True"),
    ],
)
def test_bad_declared_faults_name_the_field(faults: Any, match: str) -> None:
    with pytest.raises(OptionsError, match=match):
        CheckOptions.from_scenario({"faults": faults})


def test_other_nemesis_ops_are_not_faults_and_a_repeated_start_is_undeclared() -> None:
    h = HistoryBuilder()
    h.op("nemesis", "info", "heal", {"healed": True})  # not a fault op: skipped, not the end of the scan
    h.ops += played().ops
    assert check(h)["valid"] is True
    h.op("nemesis", "info", "fault-start", {"fault_id": 2, **DECLARED[2]})  # fault 2 started twice
    result = check(h)
    assert result["violations"] == ["undeclared"]
    assert [(e["fault_id"], e["starts"], e["ends"]) for e in result["examples"]["undeclared"]] == [(2, 2, 1)]
