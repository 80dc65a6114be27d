"""Effects: every finished attempt got each outcome exactly once, and each side effect at most once.

For every attempt that finished (the ledger shows it ``finished``, or the history
acknowledged its finish: a row that vanished from the ledger still owes its work),
per outbox kind (merit, narrative, sms):

- exactly one outcome row for ``<kind>-<attempt_id>``, with status ``ready``; a
  ``failed_for_review`` outcome is accepted only for kinds in
  ``allow_failed_for_review``, and no outcome yet (outbox row still pending or
  enqueued) only for kinds in ``allow_pending``, or as **pending** (verdict unknown) when the
  final read's queue evidence shows the row's work still in progress (chaos/checkers/jobs.py);
  anything else is **missing_<kind>**,
  reported with the outbox row's state so the reader sees where the work stopped;
- at the providers' own ledgers (the ground truth for side effects): exactly one
  SMS effect for ``sms-<attempt_id>`` when the sms outcome is ready, never more
  than one; at most one AI effect for ``narrative-<attempt_id>``, and exactly one
  when the narrative outcome is ready (a ready narrative is never template text).

Duplicates are any operation id with more than one outcome row or more than one
provider effect, except an operation replayed from the review queue: k ``failed_for_review``
records then one ``ready`` outcome with exactly k audited ``review_replay`` rows in the
audit log (the records are kept as history; issue #11) (count > 1; Jepsen's set-full ``duplicated`` reducer tests
``< 1`` and never fires, so this checker's tests include failing histories).
Outcomes or effects for attempts that never finished are **unexpected**; an ``ok``
finish whose attempt is not finished in the ledger is **finish_lost**. A finish
invoke without an attempt_id makes the result unknown.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from chaos.checkers.acknowledged import acknowledged_finishes
from chaos.checkers.base import Result, build_result, option, parse_kinds, unknown_unless_invalid
from chaos.checkers.jobs import PendingOptions, in_progress, pending_reason, queue_evidence
from chaos.history import Op
from chaos.ledgers import OUTBOX_KINDS, EffectRow, Ledgers, OutboxRow, OutcomeRow, QueueRow

__all__ = ["EffectsOptions", "NAME", "check_effects"]

NAME = "effects"

_PROVIDER_KIND = {"sms_effects": "sms", "ai_effects": "narrative"}
"""Provider ledger -> the outbox kind whose operation ids it records."""


@dataclass(frozen=True)
class EffectsOptions(PendingOptions):
    allow_failed_for_review: frozenset[str] = option(frozenset(), parse_kinds, dump=sorted)
    """Outbox kinds whose failed_for_review outcome satisfies the effects checker."""


def check_effects(history: Sequence[Op], ledgers: Ledgers, options: EffectsOptions) -> Result:
    needed = ("attempts", "outbox", "outcomes", "sms_effects", "ai_effects")
    if any(getattr(ledgers, table) is None for table in needed):
        return Result.unknown(NAME, ledgers.missing(*needed) + ["cannot account for every effect"])
    assert ledgers.attempts is not None and ledgers.outcomes is not None and ledgers.outbox is not None
    in_ledger = {a.attempt_id for a in ledgers.attempts if a.status == "finished"}
    acknowledged, malformed = acknowledged_finishes(history)
    finished = in_ledger | set(acknowledged)
    outcomes = _group(ledgers.outcomes)
    outbox = {row.operation_id: row for row in ledgers.outbox}
    effects = {table: _group(getattr(ledgers, table)) for table in _PROVIDER_KIND}

    bad: dict[str, list[Any]] = {f"missing_{kind}": [] for kind in OUTBOX_KINDS}
    info: dict[str, list[Any]] = {"pending_allowed": [], "pending": [], "failed_for_review_allowed": [],
                                  "effect_without_ready_outcome": [], "replayed_from_review": []}
    evidence = queue_evidence(ledgers)
    for attempt_id in sorted(finished):
        for kind in OUTBOX_KINDS:
            _judge_outcome(f"{kind}-{attempt_id}", kind, outcomes, outbox, options, evidence, bad, info)
    bad.update(_effect_problems(finished, outcomes, effects, info))
    replayed = _audited_replays(ledgers, outcomes)
    bad["duplicated_outcomes"] = _duplicated({op: rows for op, rows in outcomes.items() if op not in replayed},
                                             lambda rows: {"statuses": [r.status for r in rows]})
    info["replayed_from_review"] = sorted(replayed)
    bad["unexpected_outcomes"] = [
        {"operation_id": op, "attempt_id": rows[0].attempt_id, "kind": rows[0].kind}
        for op, rows in sorted(outcomes.items())
        if rows[0].attempt_id not in finished or rows[0].kind not in OUTBOX_KINDS
    ]
    bad["finish_lost"] = [{"attempt_id": aid, "index": acknowledged[aid]} for aid in sorted(set(acknowledged) - in_ledger)]
    counts = {
        "finished_attempts": len(finished),
        "outcomes": len(ledgers.outcomes),
        "sms_effects": sum(map(len, effects["sms_effects"].values())),
        "ai_effects": sum(map(len, effects["ai_effects"].values())),
        # Totals over the categories below, for callers that ask "anything twice / anything missing?"
        "duplicated": sum(len(v) for k, v in bad.items() if k.startswith("duplicated_")),
        "missing": sum(len(v) for k, v in bad.items() if k.startswith("missing_") or k.endswith("_effect_missing")),
    }
    reasons = [f"{malformed} finish invoke(s) without attempt_id: cannot tell which attempts finished"] if malformed else []
    reasons += pending_reason(info["pending"])
    return unknown_unless_invalid(build_result(NAME, bad=bad, info=info, counts=counts), reasons)


def _group(rows: Iterable[OutcomeRow | EffectRow]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        grouped[row.operation_id].append(row)
    return dict(grouped)


def _judge_outcome(
    op: str,
    kind: str,
    outcomes: Mapping[str, list[OutcomeRow]],
    outbox: Mapping[str, OutboxRow],
    options: EffectsOptions,
    evidence: Mapping[str, QueueRow] | None,
    bad: dict[str, list[Any]],
    info: dict[str, list[Any]],
) -> None:
    statuses = [row.status for row in outcomes.get(op, [])]
    row = outbox.get(op)
    example = {"operation_id": op, "outcomes": statuses, **_outbox_state(row)}
    if "ready" in statuses:
        return
    if "failed_for_review" in statuses and kind in options.allow_failed_for_review:
        info["failed_for_review_allowed"].append(example)
    elif not statuses and kind in options.allow_pending and row is not None and row.status in ("pending", "enqueued"):
        info["pending_allowed"].append(example)
    elif not statuses and row is not None and row.status in ("pending", "enqueued") and in_progress(row, evidence):
        info["pending"].append({**example, "evidence": in_progress(row, evidence)})
    else:
        bad[f"missing_{kind}"].append(example)


def _audited_replays(ledgers: Ledgers, outcomes: Mapping[str, list[OutcomeRow]]) -> set[str]:
    """Operations whose outcomes are k review records then one ready outcome, with exactly k
    audited ``review_replay`` rows: the records are kept history, the ready one is the outcome."""
    replays: dict[str, int] = defaultdict(int)
    for row in ledgers.audit_log or ():
        if row.action == "review_replay" and isinstance(row.detail, dict):
            replays[str(row.detail.get("operation_id"))] += 1
    found = set()
    for op, rows in outcomes.items():
        statuses = [row.status for row in sorted(rows, key=lambda r: (r.created_at or 0.0))]
        reviews = len(statuses) - 1
        if reviews >= 1 and statuses == ["failed_for_review"] * reviews + ["ready"] and replays[op] == reviews:
            found.add(op)
    return found


def _outbox_state(row: OutboxRow | None) -> dict[str, Any]:
    if row is None:
        return {"outbox_status": "no outbox row"}
    return {"outbox_status": row.status, "job_attempts": row.attempts, "last_error": row.last_error}


def _effect_problems(
    finished: set[str],
    outcomes: Mapping[str, list[OutcomeRow]],
    effects: Mapping[str, Mapping[str, list[EffectRow]]],
    info: dict[str, list[Any]],
) -> dict[str, list[Any]]:
    """Per provider: duplicated effects, effects missing for a ready outcome, unexpected effects."""
    bad: dict[str, list[Any]] = {}
    for table, kind in _PROVIDER_KIND.items():
        provider = table.removesuffix("_effects")
        by_op = effects[table]
        bad[f"duplicated_{provider}_effects"] = _duplicated(by_op, _effect_example)
        missing: list[Any] = []
        for attempt_id in sorted(finished):
            op = f"{kind}-{attempt_id}"
            ready = any(r.status == "ready" for r in outcomes.get(op, []))
            if ready and op not in by_op:
                missing.append({"operation_id": op})
            elif op in by_op and not ready:
                info["effect_without_ready_outcome"].append({"operation_id": op, "provider": provider})
        bad[f"{provider}_effect_missing"] = missing
        expected = {f"{kind}-{attempt_id}" for attempt_id in finished}
        bad[f"unexpected_{provider}_effects"] = [{"operation_id": op, **_effect_example(rows)} for op, rows in sorted(by_op.items()) if op not in expected]
    return bad


def _effect_example(rows: list[EffectRow]) -> dict[str, Any]:
    return {"effect_ids": [r.id for r in rows], "idempotency_keys": [r.idempotency_key for r in rows]}


def _duplicated(grouped: Mapping[str, list[Any]], describe: Any) -> list[dict[str, Any]]:
    """Operation ids recorded more than once (frequency > 1 is a duplicate)."""
    return [{"operation_id": op, "count": len(rows), **describe(rows)} for op, rows in sorted(grouped.items()) if len(rows) > 1]
