"""Answers while the ledger's write lock is held, and a web node killed inside the hold (issue #23).

A long checkpoint, a backup or a migration holds the ledger's write lock; answers wait for it
in their node. A durable answer sink says nothing to the client until its own commit, so a node
killed while answers wait loses only answers nobody was told were saved: the clients retry them
on the other node, which commits them once the lock is free. The negative control acknowledges
each answer when it is queued (``ack-at-enqueue``, stack/web/group_commit.py): the answers the
killed node had acknowledged and not committed are lost, and the answers checker must say so.
"""

from __future__ import annotations

from chaos.load.exam import WorkloadSpec
from chaos.nemesis import FaultSpec
from chaos.runner import Scenario

__all__ = ["LEDGER_SCENARIOS"]

_HOLD_AT, _HOLD_SECONDS = 2.0, 2.0
_KILL_INTO_HOLD = 1.0
"""The kill lands 1 s into the 2 s hold: answers sent to the node in that second are waiting.
The kill is ``inside`` the hold (chaos/nemesis/runner.py): it starts 1 s after the hold's start
returned, and the hold lasts until 1 s after the kill returned, however late a loaded machine
runs either (a rehearsal's kill thread started 1.7 s late and landed after a fixed 2 s hold)."""
_THINK_TIME = 0.25
"""A student's five answers span 1.25 s, so students who started before the hold (a start
waits for the lock too) are still answering inside it; without a pause every student
finished answering within ~70 ms of starting, and a seed could leave the hold with no answer
sent before the kill, so the negative control was not caught."""


def _hold_and_kill(seed: int, scenario: Scenario) -> list[FaultSpec]:
    hold = FaultSpec(at=_HOLD_AT, kind="ledger_lock", target="ledger", duration=_HOLD_SECONDS)
    kill = FaultSpec(at=_HOLD_AT + _KILL_INTO_HOLD, kind="kill", target="web_1", duration=1.5, inside=0)
    return [hold, kill]


_OPTIONS = {
    "expect_ops": ["session", "start", "answer", "finish"],
    # The hold delays every write by up to 2 s and the kill's answers are retried on the other
    # node: the client's patience for an answer, as in web_node_kill (scaled by the run's pace).
    "slo": {"answer": {"p99": 4.0}},
}


def _stall(name: str, sink: str, description: str, expect_valid: bool) -> Scenario:
    return Scenario(
        name=name,
        description=description,
        workload=WorkloadSpec(arrival_rate=4.0, duration=6.0, questions=5, think_time=_THINK_TIME),
        settings={"answer_sink": sink},
        faults=_hold_and_kill,
        options=_OPTIONS,
        expect_valid=expect_valid,
    )


LEDGER_SCENARIOS: tuple[Scenario, ...] = (
    _stall("ledger_stall_node_kill", "group-commit",
           "the ledger's write lock held 2 s and web_1 killed inside the hold, answers group-committed: "
           "every acknowledged answer is kept, none duplicated", True),
    _stall("ledger_stall_node_kill_ack_at_enqueue", "ack-at-enqueue",
           "negative control: answers acknowledged when queued, before their group commit; the node "
           "killed inside the hold takes acknowledged answers with it, and the answers checker must "
           "report them lost", False),
)
