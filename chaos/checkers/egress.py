"""Egress: every finished attempt's SMS was delivered exactly once, from the allowed address,
in time, even across a failover of the SMS worker's host (issue #26, docs/egress.md).

The proof is the SMS gateway's own effect ledger: each accepted message records the source
address the gateway saw (``source``). With ``options.egress_address`` set (the reserved
address the gateway allows), for each attempt the ledger shows ``finished``:

- no message for ``sms-<attempt>``: **not_delivered** (the lane's alerts and the gateway's
  403 refusals are listed beside it as the evidence of why);
- more than one: **duplicated**;
- a message from any other address: **wrong_source** (the gateway's allow-list let it pass);
- a message later than the derived bound: **late**.

The bound is derived from the run and printed: with a ``host_loss`` fault, the failover
time F (host lost -> first message the gateway accepted after it, measured from its ledger),
the lane's worst lateness before the loss L (message accepted - attempt finished), and the
backlog B (finished attempts still without a message when service resumed):
``bound = max(F, R) + (B + 1) x L``: the job the lost host was running returns only after
the relay sees its worker's liveness key expire (R = liveness_ttl + relay_interval, from the
run's settings), and the standby drains the backlog one message at a time, each no slower
than the slowest before the loss (a first version without R failed a correct run under the
full suite's load: the in-flight job's SMS came 2.4 s + after the loss). Without a host loss no bound is judged (noted).
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

from chaos.checkers.base import CheckerOptions, OptionsError, Result, build_result, option, unknown_unless_invalid
from chaos.history import FAULT_END, FAULT_START, Op
from chaos.ledgers import EffectRow, Ledgers

__all__ = ["EgressOptions", "NAME", "check_egress", "declared_recovery", "derive_sms_bound", "host_losses", "parse_address"]

NAME = "egress"


def parse_address(value: Any, where: str) -> str | None:
    if value is None:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise OptionsError(f"{where}={value!r}: expected one IP address") from None


@dataclass(frozen=True)
class EgressOptions(CheckerOptions):
    # The one source address the SMS gateway allows (None: no egress rule in this run: n/a).
    egress_address: str | None = option(None, parse_address)
    # Not an "options" key: filled from scenario.json's settings by CheckOptions.from_scenario.
    # The job the lost host held comes back only once the relay sees its worker's liveness key
    # expire: liveness_ttl + one relay pass (None when the run declares neither).
    in_flight_recovery: float | None = None


def declared_recovery(scenario: dict) -> float | None:
    """liveness_ttl + relay_interval of scenario.json's settings (real seconds), or None."""
    settings = scenario.get("settings") or {}
    try:
        return float(settings["liveness_ttl"]) + float(settings["relay_interval"])
    except (KeyError, TypeError, ValueError):
        return None


def host_losses(history: Sequence[Op]) -> list[dict[str, Any]]:
    """Each injected host_loss: its start detail (killed_at, pids) and its end detail (egress events)."""
    starts, ends = {}, {}
    for op in history:
        if op.process != "nemesis" or not isinstance(op.value, dict) or op.value.get("kind") != "host_loss":
            continue
        if op.f == FAULT_START and "killed_at" in op.value:
            starts[op.value.get("fault_id")] = op.value
        elif op.f == FAULT_END:
            ends[op.value.get("fault_id")] = op.value
    return [{**start, "end": ends.get(fault_id, {})} for fault_id, start in starts.items()]


def derive_sms_bound(finished_at: dict[str, float], first: dict[str, EffectRow], lost_at: float,
                     recovery: float | None = None) -> dict[str, Any]:
    """The bound's terms and derivation (see the module doc); ``value`` None when not derivable."""
    pre = [first[op].created_at - finished_at[op] for op in first
           if op in finished_at and first[op].created_at is not None and first[op].created_at < lost_at]
    after = sorted(e.created_at for e in first.values() if e.created_at is not None and e.created_at > lost_at)
    if not pre or not after:
        why = "no message before the host loss" if not pre else "no message after the host loss"
        return {"value": None, "why": why}
    resumed = after[0]
    failover = resumed - lost_at
    worst = max(pre)
    backlog = sum(1 for op, at in finished_at.items() if at <= resumed
                  and (op not in first or (first[op].created_at or 0) >= resumed))
    held = recovery or 0.0  # the job the lost host was running returns after this (R)
    value = max(failover, held) + (backlog + 1) * worst
    return {"value": round(value, 3), "failover_seconds": round(failover, 3), "worst_lateness_before": round(worst, 3),
            "backlog": backlog, "resumed_at": resumed, "in_flight_recovery": recovery,
            "derivation": f"max(F {failover:.3f} s, R {held:.3f} s) + (B {backlog} + 1) x L {worst:.3f} s = {value:.3f} s"}


def check_egress(history: Sequence[Op], ledgers: Ledgers, options: EgressOptions) -> Result:
    allowed = options.egress_address
    if allowed is None:
        return Result.not_applicable(NAME, "no egress address in this run (options.egress_address)")
    if ledgers.attempts is None or ledgers.sms_effects is None:
        return Result.unknown(NAME, ledgers.missing("attempts", "sms_effects"))
    finished_at = {f"sms-{a.attempt_id}": a.finished_at or 0.0 for a in ledgers.attempts if a.status == "finished"}
    by_op: dict[str, list[EffectRow]] = defaultdict(list)
    for effect in ledgers.sms_effects:
        by_op[effect.operation_id].append(effect)
    first = {op: min(effects, key=lambda e: e.created_at or 0.0) for op, effects in by_op.items()}
    not_delivered = [{"operation_id": op, "finished_at": at} for op, at in finished_at.items() if op not in by_op]
    duplicated = [{"operation_id": op, "messages": len(effects)} for op, effects in by_op.items() if len(effects) > 1]
    unrecorded = [e.operation_id for e in ledgers.sms_effects if not e.source]
    wrong_source = [{"operation_id": e.operation_id, "source": e.source, "allowed": allowed}
                    for e in ledgers.sms_effects if e.source and e.source != allowed]
    losses = host_losses(history)
    bound = (derive_sms_bound(finished_at, first, losses[0]["killed_at"], options.in_flight_recovery) if losses
             else {"value": None, "why": "no host loss"})
    late = []
    if bound["value"] is not None:
        late = [{"operation_id": op, "lateness": round(first[op].created_at - at, 3), "bound": bound["value"]}
                for op, at in finished_at.items() if op in first and first[op].created_at - at > bound["value"]]
    alerts = [{"kind": a.kind, "at": a.at, "detail": a.detail} for a in (ledgers.alerts or ()) if a.lane == "sms"]
    refused = [{"operation_id": r.operation_id, "at": r.at, "source": r.source}
               for r in (ledgers.sms_refusals or ()) if r.status == "403"]
    result = build_result(
        NAME,
        bad={"not_delivered": not_delivered, "duplicated": duplicated, "wrong_source": wrong_source, "late": late},
        info={"alerts": alerts, "refused_403": refused},
        counts={"finished": len(finished_at), "delivered": sum(1 for op in finished_at if op in by_op),
                "host_losses": len(losses)},
        details={"allowed": allowed, "sms_bound": bound, "host_losses": losses},
        notes=_notes(bound, not_delivered, alerts, refused),
    )
    reasons = [f"{len(unrecorded)} message(s) without a recorded source address: the egress proof is incomplete"] if unrecorded else []
    return unknown_unless_invalid(result, reasons)


def _notes(bound: dict[str, Any], not_delivered: list, alerts: list, refused: list) -> list[str]:
    notes = []
    if bound["value"] is not None:
        notes.append(f"failover (host lost -> first accepted SMS): {bound['failover_seconds']} s; "
                     f"SMS bound {bound['derivation']}")
    else:
        notes.append(f"SMS bound not judged: {bound['why']}")
    if not_delivered and (alerts or refused):
        kinds = sorted({a["kind"] for a in alerts})
        notes.append(f"{len(not_delivered)} SMS not delivered; evidence: lane alerts {kinds or '(none)'}, "
                     f"{len(refused)} gateway 403 refusal(s)")
    return notes
