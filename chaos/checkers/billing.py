"""Billing: the stack's reservations account for every provider charge, and nothing else.

Inputs are the stack's ``ai_reservations`` rows (``call_id, operation_id, state``:
pending | completed | released) and the AI provider's effect ledger. It proves:

- **bad_state**: a reservation in no known state, so reservations = completed +
  released + pending holds by construction of every row, never by a counter;
- **unreserved_charge**: a provider effect for an operation with no completed or
  pending reservation (a call made without reserving, or released though it happened);
- **completed_without_charge**: a completed reservation the provider has no effect
  for (the stack thinks it paid for something that never happened);
- **released_but_charged**: a released reservation whose operation the provider did
  charge more times than it has completed/pending reservations: released without the
  provider confirming the call did not happen.

Pending reservations at the end are reported (an unknown outcome not yet settled),
never a violation: the equation still holds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from chaos.checkers.base import Result, build_result
from chaos.ledgers import EffectRow

__all__ = ["NAME", "STATES", "billing_problems", "check_billing"]

NAME = "billing"
STATES = ("pending", "completed", "released")


def billing_problems(
    reservations: Sequence[Mapping[str, Any]], effects: Sequence[EffectRow]
) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, int]]:
    """(bad, info, counts) for ``build_result``."""
    bad: dict[str, list[Any]] = {"bad_state": [], "unreserved_charge": [], "completed_without_charge": [],
                                 "released_but_charged": []}
    states: dict[str, Counter[str]] = {}
    for row in reservations:
        if row.get("state") not in STATES:
            bad["bad_state"].append({"call_id": row.get("call_id"), "state": row.get("state")})
            continue
        states.setdefault(row["operation_id"], Counter())[row["state"]] += 1
    charged = Counter(effect.operation_id for effect in effects)
    for op in sorted(set(charged) | set(states)):
        held = states.get(op, Counter())
        covered = held["completed"] + held["pending"]
        if charged[op] > covered:
            kind = "released_but_charged" if held["released"] else "unreserved_charge"
            bad[kind].append({"operation_id": op, "charges": charged[op], **{s: held[s] for s in STATES}})
        if held["completed"] > charged[op]:
            bad["completed_without_charge"].append({"operation_id": op, "charges": charged[op],
                                                    "completed": held["completed"]})
    totals = Counter(row["state"] for row in reservations if row.get("state") in STATES)
    counts = {"reservations": len(reservations), **{s: totals[s] for s in STATES}, "charges": sum(charged.values())}
    info = {"pending_at_end": [row["call_id"] for row in reservations if row.get("state") == "pending"]}
    return bad, info, counts


def check_billing(reservations: Sequence[Mapping[str, Any]] | None, effects: Sequence[EffectRow] | None) -> Result:
    """The verdict from the stack's reservations and the provider's ledger; unknown if either was not read."""
    if reservations is None or effects is None:
        missing = [name for name, rows in (("ai_reservations", reservations), ("ai_effects", effects)) if rows is None]
        return Result.unknown(NAME, [f"ledger {name} was not read" for name in missing])
    bad, info, counts = billing_problems(reservations, effects)
    return build_result(NAME, bad=bad, info=info, counts=counts)
