"""Stats: did the run exercise anything? No vacuous pass.

A run where every answer failed "loses nothing" and would pass every other
checker. So every f in ``options.expect_ops`` must have at least one ``ok``
(Jepsen's ``stats`` checker); a missing one is **vacuous_ops** and the run is
invalid, as is a history with no client op at all.

Also counted: ok/fail/info per f (an invoke with no completion counts as info),
deliberate duplicate sends (an invoke marked ``deliberate_duplicate``: the workload
sent the request again on purpose), client retries (each other extra invoke of an
idempotency key), faults injected and faults never healed (a note: the final read
may have run during a fault).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from chaos.checkers.base import CheckerOptions, Result, build_result, option, parse_strings
from chaos.history import DELIBERATE_DUPLICATE, NEMESIS, Op, fault_windows, pair_ops
from chaos.ledgers import Ledgers

__all__ = ["NAME", "StatsOptions", "check_stats", "outcome_counts"]

NAME = "stats"


@dataclass(frozen=True)
class StatsOptions(CheckerOptions):
    expect_ops: tuple[str, ...] = option(("answer", "finish"), parse_strings, dump=list)
    """Client f's that must have at least one ok; otherwise the run proved nothing."""


def check_stats(history: Sequence[Op], ledgers: Ledgers, options: StatsOptions) -> Result:
    per_f = outcome_counts(history)
    vacuous = [{"f": f, **per_f.get(f, {"ok": 0, "fail": 0, "info": 0})} for f in options.expect_ops if not per_f.get(f, {}).get("ok")]
    no_ops = [] if per_f else [{"reason": "the history has no client op"}]
    keys = _sends_per_key(history)
    repeated = {key: sends for key, sends in keys.items() if sends.retries}
    windows = fault_windows(history)
    unhealed = [w for w in windows if w.end is None]
    counts = {
        "ops": sum(sum(c.values()) for c in per_f.values()),
        "ok": sum(c["ok"] for c in per_f.values()),
        "fail": sum(c["fail"] for c in per_f.values()),
        "info": sum(c["info"] for c in per_f.values()),
        "idempotency_keys": len(keys),
        "retried_keys": len(repeated),
        "retries": sum(sends.retries for sends in repeated.values()),
        "duplicate_sends": sum(sends.duplicates for sends in keys.values()),
        "faults": len(windows),
        "faults_unhealed": len(unhealed),
    }
    notes = [f"fault {w.fault_id} ({w.kind} {w.target}) has no fault-end: never healed" for w in unhealed]
    details = {"by_f": per_f, "expect_ops": list(options.expect_ops)}
    examples = {"retried_keys": [{"idempotency_key": key, "invokes": sends.invokes, "duplicate_sends": sends.duplicates}
                                 for key, sends in sorted(repeated.items())]}
    return build_result(NAME, bad={"vacuous_ops": vacuous, "no_client_ops": no_ops}, info=examples, counts=counts, notes=notes, details=details)


def outcome_counts(history: Sequence[Op]) -> dict[str, dict[str, int]]:
    """{f: {"ok": n, "fail": n, "info": n}} over client tries."""
    per_f: dict[str, Counter[str]] = defaultdict(Counter)
    for invoked, done in pair_ops(history):
        per_f[invoked.f][done.type if done is not None else "info"] += 1
    return {f: {t: counts[t] for t in ("ok", "fail", "info")} for f, counts in sorted(per_f.items())}


@dataclass
class _Sends:
    """The invokes of one idempotency key, and how many deliberate resends (by their number) are among them."""

    invokes: int = 0
    resends: set[Any] = field(default_factory=set)

    @property
    def duplicates(self) -> int:
        return len(self.resends)

    @property
    def retries(self) -> int:
        """Extra invokes the workload did not send on purpose: the client's retries."""
        return max(0, self.invokes - 1 - self.duplicates)


def _sends_per_key(history: Sequence[Op]) -> dict[str, _Sends]:
    keys: dict[str, _Sends] = defaultdict(_Sends)
    for op in history:
        if op.type == "invoke" and op.process != NEMESIS and isinstance(op.value, dict):
            key: Any = op.value.get("idempotency_key")
            if key:
                sends = keys[str(key)]
                sends.invokes += 1
                if op.value.get(DELIBERATE_DUPLICATE):
                    sends.resends.add(op.value[DELIBERATE_DUPLICATE])
    return dict(keys)
