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

A lane may still be calling while the final read runs (a backlog allowed to stay pending),
so the reservations are read twice, before and after the provider's ledger. A reservation is
written before its call and only moves pending -> completed | released, so: every charge in
the invoice has its reservation in the later read (coverage is judged on it), and every
reservation completed in the earlier read was charged before the invoice was read (the
completed-without-charge check is judged on it). A run folder with one read uses it for both.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from chaos.checkers.base import Result, build_result
from chaos.ledgers import EffectRow

__all__ = ["NAME", "STATES", "billing_problems", "check_billing"]

NAME = "billing"
STATES = ("pending", "completed", "released")


def _states(reservations: Sequence[Mapping[str, Any]], bad_state: list[Any]) -> dict[str, Counter[str]]:
    states: dict[str, Counter[str]] = {}
    for row in reservations:
        if row.get("state") not in STATES:
            bad_state.append({"call_id": row.get("call_id"), "state": row.get("state")})
            continue
        states.setdefault(row["operation_id"], Counter())[row["state"]] += 1
    return states


def billing_problems(
    reservations: Sequence[Mapping[str, Any]], effects: Sequence[EffectRow],
    reservations_after: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, int]]:
    """(bad, info, counts) for ``build_result``; ``reservations_after`` is the read after the invoice."""
    bad: dict[str, list[Any]] = {"bad_state": [], "unreserved_charge": [], "completed_without_charge": [],
                                 "released_but_charged": []}
    latest = reservations if reservations_after is None else reservations_after
    after = _states(latest, bad["bad_state"])
    before = after if reservations_after is None else _states(reservations, [])  # bad states: from the latest read
    charged = Counter(effect.operation_id for effect in effects)
    for op in sorted(set(charged) | set(before) | set(after)):
        held = after.get(op, Counter())
        if charged[op] > held["completed"] + held["pending"]:
            kind = "released_but_charged" if held["released"] else "unreserved_charge"
            bad[kind].append({"operation_id": op, "charges": charged[op], **{s: held[s] for s in STATES}})
        completed = before.get(op, Counter())["completed"]
        if completed > charged[op]:
            bad["completed_without_charge"].append({"operation_id": op, "charges": charged[op],
                                                    "completed": completed})
    totals = Counter(row["state"] for row in latest if row.get("state") in STATES)
    counts = {"reservations": len(latest), **{s: totals[s] for s in STATES}, "charges": sum(charged.values())}
    info = {"pending_at_end": [row["call_id"] for row in latest if row.get("state") == "pending"]}
    return bad, info, counts


def check_billing(reservations: Sequence[Mapping[str, Any]] | None, effects: Sequence[EffectRow] | None,
                  reservations_after: Sequence[Mapping[str, Any]] | None = None) -> Result:
    """The verdict from the stack's reservations and the provider's ledger; unknown if either was not read."""
    if reservations is None or effects is None:
        missing = [name for name, rows in (("ai_reservations", reservations), ("ai_effects", effects)) if rows is None]
        return Result.unknown(NAME, [f"ledger {name} was not read" for name in missing])
    bad, info, counts = billing_problems(reservations, effects, reservations_after)
    return build_result(NAME, bad=bad, info=info, counts=counts)
