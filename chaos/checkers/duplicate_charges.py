"""Duplicate charges: no operation was charged by the provider more than once.

The provider's ledger is the invoice: two effects for one operation id are two
charges, whatever the stack's own counters say ("changing an app counter cannot
refund a provider invoice"). **duplicate_charges** lists each such operation with
its effect count and total cost.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from chaos.checkers.base import Result, build_result
from chaos.history import Op
from chaos.ledgers import EffectRow, Ledgers

__all__ = ["NAME", "check_duplicate_charges", "duplicate_charges"]

NAME = "duplicate_charges"


def duplicate_charges(effects: Sequence[EffectRow]) -> list[dict[str, Any]]:
    charged: dict[str, list[EffectRow]] = defaultdict(list)
    for effect in effects:
        charged[effect.operation_id].append(effect)
    return [{"operation_id": op, "effects": len(rows), "cost": sum(row.cost or 0.0 for row in rows)}
            for op, rows in sorted(charged.items()) if len(rows) > 1]


def check_duplicate_charges(history: Sequence[Op], ledgers: Ledgers, options: object) -> Result:
    if ledgers.ai_effects is None:
        return Result.unknown(NAME, ledgers.missing("ai_effects"))
    return build_result(NAME, bad={"duplicate_charges": duplicate_charges(ledgers.ai_effects)},
                        counts={"effects": len(ledgers.ai_effects)})
