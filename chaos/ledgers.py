"""The final read: ledger snapshots of a run folder, as typed rows.

After the run heals and goes quiet, the harness exports the stack's ledger tables
and each fake provider's effect ledger into ``<run_dir>/ledgers/`` (format in
docs/architecture.md, "Export format"). Checkers compare these with the history.

A table that could not be read is ``None`` (with the reason in ``problems``), never
an empty tuple: "no rows" and "never read" must not look alike, or a failed export
would pass as "nothing lost" (Jepsen: a set never read is ``unknown``).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, TypeVar

__all__ = [
    "AlertRow",
    "AnswerRow",
    "AttemptRow",
    "AuditRow",
    "EffectRow",
    "ExamRow",
    "LANE_OF_KIND",
    "LEDGER_FILES",
    "LaneStateRow",
    "LogLineRow",
    "ProducedRow",
    "ShipperStatRow",
    "LedgerFormatError",
    "QueueRow",
    "Ledgers",
    "OUTBOX_KINDS",
    "OutboxRow",
    "OutcomeRow",
    "RevisionRow",
    "RefusalRow",
    "ReservationRow",
    "load_ledgers",
]

OUTBOX_KINDS = ("merit", "narrative", "sms")
"""Mirrors stack.ledger.schema.OUTBOX_KINDS (copied so analysis imports no stack code)."""

LANE_OF_KIND = {"merit": "merit", "narrative": "ai", "sms": "sms"}
"""Mirrors stack.lanes.queues.LANE_OF_KIND (that module imports rq/redis)."""

LEDGER_FILES = {
    "attempts": "attempts.json",
    "answers": "answers.json",
    "answer_revisions": "answer_revisions.json",
    "outbox": "outbox.json",
    "outcomes": "outcomes.json",
    "ai_effects": "ai_effects.json",
    "sms_effects": "sms_effects.json",
    "exams": "exams.json",
    "ai_reservations": "ai_reservations.json",
    "ai_reservations_after": "ai_reservations_after.json",  # read again after the provider ledgers (billing)
    "audit_log": "audit_log.json",
    "alerts": "alerts.json",
    "lane_state": "lane_state.json",
    "ai_refusals": "ai_effects.json",  # the same provider export, its "refusals" list
    "sms_refusals": "sms_effects.json",
    "log_lines": "log_lines.json",  # the log store's ledger (docs/log-shipping.md)
    "log_produced": "log_produced.json",
    "shipper_stats": "shipper_stats.json",
    "queues": "queues.json",  # read last: where each open row's job was (stack/lanes/evidence.py)
}
"""Ledgers attribute -> file name under <run_dir>/ledgers/."""


class LedgerFormatError(ValueError):
    """An export file is not in the export format; the message names file, row and field."""


@dataclass(frozen=True)
class AttemptRow:
    attempt_id: str
    status: str
    student_id: str | None = None
    exam_code: str | None = None
    started_at: float | None = None
    finished_at: float | None = None


@dataclass(frozen=True)
class AnswerRow:
    receipt_id: str
    attempt_id: str
    question: str
    content: str
    student_id: str | None = None
    idempotency_key: str | None = None
    node: str | None = None
    created_at: float | None = None
    revision: int | None = None
    """The current revision (absent in run folders older than answer revisions)."""


@dataclass(frozen=True)
class RevisionRow:
    """One row of the append-only answer revision log."""

    receipt_id: str
    attempt_id: str
    question: str
    revision: int
    content: str
    idempotency_key: str | None = None
    node: str | None = None
    created_at: float | None = None
    superseded: bool | None = None


@dataclass(frozen=True)
class OutboxRow:
    operation_id: str
    attempt_id: str
    kind: str
    status: str
    attempts: int | None = None
    job_id: str | None = None
    last_error: str | None = None
    created_at: float | None = None
    enqueued_at: float | None = None
    done_at: float | None = None


@dataclass(frozen=True)
class OutcomeRow:
    operation_id: str
    attempt_id: str
    kind: str
    status: str
    id: int | str | None = None
    payload: Any = None
    created_at: float | None = None


@dataclass(frozen=True)
class EffectRow:
    """One side effect at a fake provider (an SMS sent, an AI call charged)."""

    operation_id: str
    id: int | str | None = None
    idempotency_key: str | None = None
    created_at: float | None = None
    request: Any = None
    response: Any = None
    """What the provider answered (absent in run folders older than the payload checks)."""
    started_at: float | None = None
    """When the call reached the provider: what limit checkers count (absent before issue #11)."""
    cost: float | None = None
    """What the provider charged for this effect (absent before issue #11)."""
    source: str | None = None
    """The caller's address as the provider saw it (absent before issue #26): the egress proof."""


@dataclass(frozen=True)
class ExamRow:
    """One exam: its answer key is what merit scores are recomputed from."""

    exam_code: str
    question_count: int
    answer_key: Mapping[str, str]


@dataclass(frozen=True)
class ReservationRow:
    """Allowance reserved before one AI provider call (issue #11): pending | completed | released."""

    call_id: str
    operation_id: str
    state: str
    cost: float | None = None
    reserved_at: float | None = None
    settled_at: float | None = None
    note: str | None = None


@dataclass(frozen=True)
class AuditRow:
    """One audited action; ``lane_pause``/``lane_resume`` bound a lane's paused windows."""

    action: str
    at: float
    id: int | None = None
    actor: str | None = None
    detail: Any = None


@dataclass(frozen=True)
class AlertRow:
    """An alert the stack raised (credit exhausted, key revoked)."""

    lane: str
    kind: str
    at: float | None = None
    id: int | None = None
    detail: Any = None


@dataclass(frozen=True)
class LaneStateRow:
    """A lane's pause state at the final read (no row: never paused)."""

    lane: str
    paused: bool
    reason: str | None = None
    since: float | None = None


@dataclass(frozen=True)
class RefusalRow:
    """A call the provider refused (429, 402, 401...): when it arrived and the Retry-After it asked for."""

    operation_id: str
    at: float
    status: str  # the HTTP status as text ("429"), like every status field of the exports
    retry_after_seconds: float | None = None
    source: str | None = None
    """The refused caller's address (the SMS gateway's 403s, issue #26)."""


@dataclass(frozen=True)
class QueueRow:
    """Where an outbox row still open at the final read had its job, read from the queues after
    the ledger exports: ``state`` is one of stack.lanes.evidence's states (``queued``, ``running``,
    ``abandoned``, ``absent``...)."""

    operation_id: str
    kind: str
    status: str  # the row's outbox status when the queues were read
    state: str
    lane: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class LogLineRow:
    """One line the log store received (its ledger): where it came from and the line's own time."""

    file: str
    offset: str
    msg: str
    id: int | None = None
    line_time: str | None = None
    received_at: float | None = None


@dataclass(frozen=True)
class ProducedRow:
    """One component log at the final read: the start offset of each complete line it held."""

    file: str
    offsets: Any = ()


@dataclass(frozen=True)
class ShipperStatRow:
    """The shipper's own counters at the final read (stack/logship/stats.py); ``counted`` False
    when it kept none."""

    name: str
    counted: bool = False
    queued: int | None = None
    shipped: int | None = None
    dropped: int | None = None
    enqueued: int | None = None
    resumed: int | None = None
    drain: Any = None


Row = TypeVar("Row", AttemptRow, AnswerRow, RevisionRow, OutboxRow, OutcomeRow, EffectRow, ExamRow, ReservationRow, AuditRow,
              AlertRow, LaneStateRow, RefusalRow, QueueRow, LogLineRow, ProducedRow, ShipperStatRow)

_ROW_TYPES: dict[str, type] = {
    "attempts": AttemptRow,
    "answers": AnswerRow,
    "answer_revisions": RevisionRow,
    "outbox": OutboxRow,
    "outcomes": OutcomeRow,
    "ai_effects": EffectRow,
    "sms_effects": EffectRow,
    "exams": ExamRow,
    "ai_reservations": ReservationRow,
    "ai_reservations_after": ReservationRow,
    "audit_log": AuditRow,
    "alerts": AlertRow,
    "lane_state": LaneStateRow,
    "ai_refusals": RefusalRow,
    "sms_refusals": RefusalRow,
    "queues": QueueRow,
    "log_lines": LogLineRow,
    "log_produced": ProducedRow,
    "shipper_stats": ShipperStatRow,
}

_FLOAT_FIELDS = {"started_at", "finished_at", "created_at", "enqueued_at", "done_at", "cost", "reserved_at", "settled_at",
                 "at", "since", "retry_after_seconds"}


@dataclass(frozen=True)
class Ledgers:
    """Every table of the final read; None means not read (see ``problems`` for why)."""

    attempts: tuple[AttemptRow, ...] | None = None
    answers: tuple[AnswerRow, ...] | None = None
    answer_revisions: tuple[RevisionRow, ...] | None = None
    outbox: tuple[OutboxRow, ...] | None = None
    outcomes: tuple[OutcomeRow, ...] | None = None
    ai_effects: tuple[EffectRow, ...] | None = None
    sms_effects: tuple[EffectRow, ...] | None = None
    exams: tuple[ExamRow, ...] | None = None
    ai_reservations: tuple[ReservationRow, ...] | None = None
    ai_reservations_after: tuple[ReservationRow, ...] | None = None
    """The same table read once more after the provider ledgers: see chaos/checkers/billing.py."""
    audit_log: tuple[AuditRow, ...] | None = None
    alerts: tuple[AlertRow, ...] | None = None
    lane_state: tuple[LaneStateRow, ...] | None = None
    ai_refusals: tuple[RefusalRow, ...] | None = None
    sms_refusals: tuple[RefusalRow, ...] | None = None
    queues: tuple[QueueRow, ...] | None = None
    """The open rows' jobs at the final read; None for a run folder from before the queue read."""
    log_lines: tuple[LogLineRow, ...] | None = None
    log_produced: tuple[ProducedRow, ...] | None = None
    shipper_stats: tuple[ShipperStatRow, ...] | None = None
    exported_at: Mapping[str, float] = field(default_factory=dict)
    problems: Mapping[str, str] = field(default_factory=dict)

    def missing(self, *tables: str) -> list[str]:
        """One note per named table that was not read, e.g. for a checker's unknown verdict."""
        notes = []
        for table in tables:
            if getattr(self, table) is None:
                why = self.problems.get(table, "not exported")
                notes.append(f"ledger {table} was not read: {why}")
        return notes

    @classmethod
    def from_exports(cls, **exports: Any) -> "Ledgers":
        """Build from export documents or bare row lists, keyed by table (tests, in-memory use).

        ``Ledgers.from_exports(attempts=[{...}], sms_effects={"provider": "sms", "effects": [...]})``
        """
        unknown = set(exports) - set(LEDGER_FILES)
        if unknown:
            raise TypeError(f"unknown ledger tables: {sorted(unknown)}")
        tables: dict[str, Any] = {}
        exported_at: dict[str, float] = {}
        for table, document in exports.items():
            if document is None:
                continue
            rows, at = _rows_of(table, document, source=table, allow_bare_list=True)
            tables[table] = rows
            if at is not None:
                exported_at[table] = at
        return cls(**tables, exported_at=exported_at)


def load_ledgers(run_dir: str | Path) -> Ledgers:
    """Read ``<run_dir>/ledgers/*.json``; a missing or malformed file leaves its table None."""
    folder = Path(run_dir) / "ledgers"
    tables: dict[str, Any] = {}
    exported_at: dict[str, float] = {}
    problems: dict[str, str] = {}
    for table, name in LEDGER_FILES.items():
        path = folder / name
        if not path.is_file():
            problems[table] = f"{path} does not exist"
            continue
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            rows, at = _rows_of(table, document, source=str(path))
        except (OSError, json.JSONDecodeError, LedgerFormatError) as exc:
            problems[table] = f"{type(exc).__name__}: {exc}"
            continue
        tables[table] = rows
        if at is not None:
            exported_at[table] = at
    return Ledgers(**tables, exported_at=exported_at, problems=problems)


def _rows_of(table: str, document: Any, source: str, allow_bare_list: bool = False) -> tuple[tuple[Any, ...], float | None]:
    """Rows and exported_at of one export document.

    The document must name what it holds (``"table"`` for a stack table, ``"provider"``
    for a provider ledger): a file copied from the wrong table or provider is refused,
    not read as this one. A bare list of rows names nothing, so only in-memory callers
    (``Ledgers.from_exports``) may pass one.
    """
    exported_at = None
    if isinstance(document, Mapping):
        from_provider = table.endswith(("_effects", "_refusals"))  # e.g. ai_refusals: provider "ai", list "refusals"
        identity, expected = ("provider", table.rsplit("_", 1)[0]) if from_provider else ("table", table.removesuffix("_after"))
        if document.get(identity) != expected:
            raise LedgerFormatError(f"{source}: {identity}={document.get(identity)!r}, expected {expected!r}")
        key = table.rsplit("_", 1)[1] if from_provider else "rows"
        if not isinstance(document.get(key), list):
            raise LedgerFormatError(f"{source}: no {key!r} list")
        exported_at = _exported_at(document.get("exported_at"), source)
        document = document[key]
    elif not (allow_bare_list and isinstance(document, list)):
        raise LedgerFormatError(f"{source}: expected an export object naming its {'provider' if table.endswith('_effects') else 'table'}"
                                f", got {type(document).__name__}")
    row_type = _ROW_TYPES[table]
    return tuple(_row(row_type, raw, f"{source} row {i}") for i, raw in enumerate(document)), exported_at


def _exported_at(value: Any, source: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LedgerFormatError(f"{source}: exported_at={value!r} is not a number")
    return float(value)


def _row(row_type: type[Row], raw: Any, where: str) -> Row:
    if not isinstance(raw, Mapping):
        raise LedgerFormatError(f"{where}: expected an object, got {type(raw).__name__}")
    values: dict[str, Any] = {}
    for spec in fields(row_type):
        if raw.get(spec.name) is None and spec.default is MISSING:
            raise LedgerFormatError(f"{where}: missing field {spec.name!r}")
        if spec.name not in raw:  # optional field: keep its default
            continue
        values[spec.name] = _coerce(spec.name, raw[spec.name], where)
    return row_type(**values)


def _coerce(name: str, value: Any, where: str) -> Any:
    if value is None:
        return None
    if name in _FLOAT_FIELDS:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise LedgerFormatError(f"{where}: {name}={value!r} is not a number") from None
    if name == "payload" and isinstance(value, str):
        # The ledger stores payload as JSON text; an export may pass it through unparsed.
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    if name == "revision" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise LedgerFormatError(f"{where}: revision={value!r} is not a whole number >= 1")
    if name == "question_count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LedgerFormatError(f"{where}: question_count={value!r} is not a whole number >= 1")
    if name == "answer_key" and not (isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())):
        raise LedgerFormatError(f"{where}: answer_key must map each question to a letter, got {value!r:.80}")
    if name == "paused":
        return bool(value)
    if name in {"attempt_id", "operation_id", "question", "receipt_id", "kind", "status", "exam_code", "call_id",
                "state", "action", "lane"}:
        return str(value)
    return value
