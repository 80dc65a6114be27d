"""Faults: the chaos the scenario declared really happened, and every fault was healed.

A run with no chaos in it must not pass as a chaos run. scenario.json's "faults"
list is what the nemesis was told to do; the nemesis logs each fault it plays as a
``fault-start`` op (and ``fault-end`` once undone) whose ``fault_id`` is the fault's
position in that list (chaos/nemesis/runner.py). So, per declared fault:

- no ``fault-start`` with its fault_id: **not_injected**;
- a ``fault-start`` carrying ``error`` (the nemesis could not inject it): **injection_failed**;
- a ``fault-start`` whose kind, target, at or duration differ from the declaration:
  **mismatched** (params are not compared: the nemesis's own detail, logged in the
  same object, may reuse their names);
- a ``fault-start`` with no ``fault-end``: **unhealed** (the final read may have run
  during the fault, so nothing after it is trustworthy).

Fault ops that match no declared fault (an unknown or repeated fault_id, an end
without a start) are **undeclared**. Without a declared list (an old or hand-made
scenario.json) the result is unknown: the history alone cannot say what should
have happened.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from chaos.checkers.base import CheckerOptions, OptionsError, Result, build_result, unknown_unless_invalid
from chaos.history import NEMESIS, Op
from chaos.ledgers import Ledgers

__all__ = ["DeclaredFault", "FaultsOptions", "NAME", "check_faults", "declared_faults"]

NAME = "faults"

_PHASES = ("fault-start", "fault-end")


@dataclass(frozen=True)
class DeclaredFault:
    """One fault of scenario.json's "faults" list (FaultSpec.as_dict: at, kind, target,
    duration, then its params flattened in). Its position in the list is its fault_id."""

    fault_id: int
    at: float
    kind: str
    target: str
    duration: float


@dataclass(frozen=True)
class FaultsOptions(CheckerOptions):
    declared_faults: tuple[DeclaredFault, ...] | None = None
    """scenario.json's top-level "faults" (not an "options" key, so a plain field): what the nemesis
    was told to do; None = not declared. CheckOptions.from_scenario fills it with declared_faults()."""


def declared_faults(value: Any) -> tuple[DeclaredFault, ...] | None:
    """scenario.json's "faults" list, checked; None when the scenario declares none."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise OptionsError(f"faults={value!r:.80}: expected a list of faults")
    return tuple(_declared_fault(fault_id, fault) for fault_id, fault in enumerate(value))


def _declared_fault(fault_id: int, fault: Any) -> DeclaredFault:
    where = f"faults[{fault_id}]"
    if not isinstance(fault, Mapping):
        raise OptionsError(f"{where}={fault!r:.80}: expected an object")
    for key in ("kind", "target"):
        if not isinstance(fault.get(key), str):
            raise OptionsError(f"{where}.{key}={fault.get(key)!r}: expected a string")
    for key in ("at", "duration"):
        if isinstance(fault.get(key), bool) or not isinstance(fault.get(key), (int, float)):
            raise OptionsError(f"{where}.{key}={fault.get(key)!r}: expected a number of seconds")
    return DeclaredFault(fault_id, float(fault["at"]), fault["kind"], fault["target"], float(fault["duration"]))


def check_faults(history: Sequence[Op], ledgers: Ledgers, options: FaultsOptions) -> Result:
    ops = _fault_ops(history)
    bad: dict[str, list[Any]] = {"not_injected": [], "injection_failed": [], "mismatched": [], "unhealed": [], "undeclared": []}
    declared = {fault.fault_id: fault for fault in options.declared_faults or ()}
    for fault_id, fault in sorted(declared.items()):
        _judge_declared(fault, ops.get(fault_id, {}), bad)
    for fault_id, phases in sorted(ops.items(), key=lambda item: str(item[0])):
        _judge_observed(fault_id, phases, fault_id in declared or options.declared_faults is None, bad)
    counts = {"declared": len(declared), "started": sum(len(p["fault-start"]) for p in ops.values()),
              "ended": sum(len(p["fault-end"]) for p in ops.values())}
    result = build_result(NAME, bad=bad, counts=counts)
    if options.declared_faults is None:
        return unknown_unless_invalid(result, ["scenario.json declares no \"faults\" list: cannot tell whether the declared chaos happened"])
    return result


def _fault_ops(history: Sequence[Op]) -> dict[Any, dict[str, list[Op]]]:
    """fault_id -> {"fault-start": [ops], "fault-end": [ops]} over the nemesis's fault ops."""
    ops: dict[Any, dict[str, list[Op]]] = defaultdict(lambda: {phase: [] for phase in _PHASES})
    for op in history:
        if op.process != NEMESIS or op.f not in _PHASES:
            continue
        value = op.value if isinstance(op.value, dict) else {}
        ops[value.get("fault_id")][op.f].append(replace(op, value=value))
    return dict(ops)


def _judge_declared(fault: DeclaredFault, phases: dict[str, list[Op]], bad: dict[str, list[Any]]) -> None:
    starts = phases.get("fault-start", [])
    if not starts:
        bad["not_injected"].append({"fault_id": fault.fault_id, "kind": fault.kind, "target": fault.target, "at": fault.at})
        return
    logged = starts[0].value
    wanted = {"kind": fault.kind, "target": fault.target, "at": fault.at, "duration": fault.duration}
    differs = {key: {"declared": want, "logged": logged.get(key)} for key, want in wanted.items() if logged.get(key) != want}
    if differs:
        bad["mismatched"].append({"fault_id": fault.fault_id, "index": starts[0].index, "differs": differs})


def _judge_observed(fault_id: Any, phases: dict[str, list[Op]], declared: bool, bad: dict[str, list[Any]]) -> None:
    """What the fault ops themselves show: failed or unhealed faults, and ops no declaration explains."""
    starts, ends = phases["fault-start"], phases["fault-end"]
    indexes = [op.index for op in starts + ends]
    if not declared or len(starts) > 1 or len(ends) > 1 or (ends and not starts):
        bad["undeclared"].append({"fault_id": fault_id, "starts": len(starts), "ends": len(ends), "indexes": indexes})
    if not starts:
        return
    first = starts[0]
    example = {"fault_id": fault_id, "kind": first.value.get("kind"), "target": first.value.get("target"), "index": first.index}
    if first.value.get("error"):
        bad["injection_failed"].append({**example, "error": first.value["error"]})
    elif not ends:
        bad["unhealed"].append(example)
