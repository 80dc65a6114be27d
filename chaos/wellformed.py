"""Well-formedness of a history: the shape a history must have before any checker judges it.

A checker reads a history as evidence. A history that is not well-formed (a completion
no invoke explains, two requests in flight on one process, a line moved out of place,
time running backwards) cannot be judged: whatever a checker concluded from it would
rest on ops that cannot have happened as written. So ``proctor check`` runs these
rules first, in **file order** (before anything sorts the ops by index, which would hide
a misplaced line), and a history that breaks one is **unknown** (exit 2), naming the
first bad line.

The rules (docs/checkers.md, "Well-formed histories"):

- ``index`` is strictly increasing in file order (so no duplicates; an index or time that is
  not a number is refused earlier, by the reader, naming its line);
- ``time`` is a finite number that never runs backwards in file order (hence never
  within a process either);
- ``type`` is invoke, ok, fail or info; ``f`` is known: a client request
  (``CLIENT_FUNCTIONS``) on an integer process, or a harness op kind (``OP_KINDS``)
  written as ``info`` by the process that kind belongs to;
- a process has at most one outstanding invoke;
- every completion (ok, fail, info) of a client follows an invoke of the same process,
  has the same ``f``, and carries the invoke's value unchanged (a completion may add
  fields, such as a read's result, never alter one);
- a ``fault-end`` follows an open ``fault-start`` of the same ``fault_id``, and a
  ``fault-start`` never reuses the id of a fault still open.

Fields this version does not know pass (the open-model load adds an intended start to
ops; ``time`` stays when the op was written).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from chaos.history import COMPLETION_TYPES, FAULT_END, FAULT_START, MONITOR, NEMESIS, OP_KINDS, Op

__all__ = ["CLIENT_FUNCTIONS", "Malformed", "first_malformed"]

CLIENT_FUNCTIONS = frozenset({"session", "start", "answer", "finish", "merit_card", "revise", "read_answers"})
"""Every request a workload sends (chaos/load/exam.py, chaos/ops/revisions.py, loadtests/ramp_student.py);
tests/unit/test_wellformed.py keeps this set equal to the names those files use."""


@dataclass(frozen=True)
class Malformed:
    """The first line of a history that breaks a well-formedness rule."""

    line: int
    rule: str
    detail: str

    def describe(self) -> str:
        return f"line {self.line} is not well-formed ({self.rule}): {self.detail}"


def first_malformed(lines: Iterable[tuple[int, Op]]) -> Malformed | None:
    """The first (line number, op) in file order that breaks a rule; None for a well-formed history."""
    state = _State()
    for number, op in lines:
        problem = state.admit(op)
        if problem is not None:
            return Malformed(number, *problem)
    return None


class _State:
    """What the ops so far leave open: the last index and time, invokes in flight, open faults."""

    def __init__(self) -> None:
        self.last_index: int | None = None
        self.last_time = -math.inf
        self.in_flight: dict[Any, Op] = {}
        self.open_faults: set[Any] = set()

    def admit(self, op: Op) -> tuple[str, str] | None:
        """(rule, detail) when ``op`` cannot follow the ops before it; else record it and return None."""
        for rule in (self._order, self._kind, self._pairing, self._faults):
            problem = rule(op)
            if problem is not None:
                return problem
        self.last_index, self.last_time = op.index, op.time
        return None

    def _order(self, op: Op) -> tuple[str, str] | None:
        if self.last_index is not None and op.index <= self.last_index:
            return "index", f"index {op.index} does not follow index {self.last_index}"
        if not math.isfinite(op.time):
            return "time", f"time {op.time!r} is not a finite number"
        if op.time < self.last_time:
            return "time", f"time {op.time} runs backwards from {self.last_time} (op {op.index})"
        return None

    def _kind(self, op: Op) -> tuple[str, str] | None:
        if op.process in (NEMESIS, MONITOR) or op.f in OP_KINDS:
            if OP_KINDS.get(op.f) != op.process or op.type != "info":
                return "function", (f"op {op.index}: {op.type} {op.f!r} by process {op.process!r} is not a harness op "
                                    f"(kinds {sorted(OP_KINDS)}, written as info by their own process)")
            return None
        if type(op.process) is not int:
            return "process", f"op {op.index}: process {op.process!r} is neither a client number nor {NEMESIS}/{MONITOR}"
        if op.f not in CLIENT_FUNCTIONS:
            return "function", f"op {op.index}: client function {op.f!r} is not one of {sorted(CLIENT_FUNCTIONS)}"
        return None

    def _pairing(self, op: Op) -> tuple[str, str] | None:
        if not op.is_client:
            return None
        invoked = self.in_flight.get(op.process)
        if op.type == "invoke":
            if invoked is not None:
                return "one invoke per process", (f"op {op.index}: process {op.process} invokes {op.f!r} while its "
                                                  f"op {invoked.index} ({invoked.f!r}) is still outstanding")
            self.in_flight[op.process] = op
            return None
        if invoked is None:
            return "completion", f"op {op.index}: {op.type} of {op.f!r} on process {op.process} follows no invoke"
        mismatch = _mismatch(invoked, op)
        if mismatch is not None:
            return "completion", f"op {op.index}: {op.type} does not match its invoke, op {invoked.index}: {mismatch}"
        del self.in_flight[op.process]
        return None

    def _faults(self, op: Op) -> tuple[str, str] | None:
        if op.f not in (FAULT_START, FAULT_END):
            return None
        fault_id = op.value.get("fault_id") if isinstance(op.value, dict) else None
        if fault_id is None:
            return "fault", f"op {op.index}: {op.f} carries no fault_id"
        if op.f == FAULT_START:
            if fault_id in self.open_faults:
                return "fault", f"op {op.index}: fault-start of fault {fault_id!r}, which is still open"
            self.open_faults.add(fault_id)
            return None
        if fault_id not in self.open_faults:
            return "fault", f"op {op.index}: fault-end of fault {fault_id!r} follows no open fault-start"
        self.open_faults.discard(fault_id)
        return None


def _mismatch(invoked: Op, done: Op) -> str | None:
    """Why ``done`` is not ``invoked``'s completion (None when it is)."""
    assert done.type in COMPLETION_TYPES  # Op.from_dict admits no other type
    if done.f != invoked.f:
        return f"function {done.f!r}, invoked {invoked.f!r}"
    if isinstance(invoked.value, dict) and isinstance(done.value, dict):
        changed = sorted(key for key, value in invoked.value.items() if key not in done.value or done.value[key] != value)
        return f"value fields {changed} differ from the invoke's" if changed else None
    return None if done.value == invoked.value else "value differs from the invoke's"
