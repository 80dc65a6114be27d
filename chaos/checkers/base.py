"""What every checker returns, how verdicts combine, and the options checkers take.

A checker is a pure function ``(history, ledgers, options) -> Result``. Its verdict
``valid`` is True, False, or "unknown" (it could not tell, e.g. a ledger was never
read). Combining verdicts ranks false > unknown > true: one proven violation makes
the run invalid; otherwise anything unproven makes it unknown. Only a run where
every checker proved its invariant is valid.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence, Union

from chaos.history import Op
from chaos.ledgers import OUTBOX_KINDS, Ledgers

__all__ = [
    "CheckOptions",
    "Checker",
    "DeclaredFault",
    "MAX_EXAMPLES",
    "OptionsError",
    "Result",
    "UNKNOWN",
    "Validity",
    "build_result",
    "check_safe",
    "compose",
    "declared_time_scale",
    "merge_validity",
    "summarize",
    "unknown_unless_invalid",
]

UNKNOWN: Literal["unknown"] = "unknown"
Validity = Union[bool, Literal["unknown"]]

MAX_EXAMPLES = 8
"""Examples kept per category: enough to debug from, small enough to read (Jepsen keeps 8)."""

SLO_THRESHOLDS = ("p50", "p95", "p99", "max", "oldest_age")


class OptionsError(ValueError):
    """scenario.json "options" holds a value the checkers cannot use; names the key."""


@dataclass
class Result:
    """One checker's verdict and its evidence. ``checks`` holds sub-results of a composition."""

    name: str
    valid: Validity
    counts: dict[str, Any] = field(default_factory=dict)
    examples: dict[str, list[Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, "Result"] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    """Names of the categories that made this result invalid (non-zero counts)."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "valid": self.valid,
            "counts": self.counts,
            "violations": self.violations,
            "examples": self.examples,
            "notes": self.notes,
        }
        if self.details:
            data["details"] = self.details
        if self.checks:
            data["checks"] = {name: check.to_dict() for name, check in self.checks.items()}
        return data

    @classmethod
    def unknown(cls, name: str, notes: Iterable[str], counts: Mapping[str, Any] | None = None) -> "Result":
        return cls(name, UNKNOWN, counts=dict(counts or {}), notes=list(notes))


Checker = Callable[[Sequence[Op], Ledgers, "CheckOptions"], Result]


def build_result(
    name: str,
    *,
    bad: Mapping[str, Sequence[Any]],
    info: Mapping[str, Sequence[Any]] | None = None,
    counts: Mapping[str, Any] | None = None,
    notes: Iterable[str] = (),
    details: Mapping[str, Any] | None = None,
) -> Result:
    """A Result from problem lists: any non-empty ``bad`` list makes it invalid.

    ``info`` lists are reported (counts, examples) but never invalidate. Every
    category gets a count, so a report shows "lost: 0", not silence.
    """
    info = info or {}
    all_counts: dict[str, Any] = dict(counts or {})
    examples: dict[str, list[Any]] = {}
    for category, items in {**bad, **info}.items():
        all_counts[category] = len(items)
        if items:
            examples[category] = list(items[:MAX_EXAMPLES])
    violations = [category for category, items in bad.items() if items]
    return Result(name, not violations, all_counts, examples, list(notes), dict(details or {}), violations=violations)


def unknown_unless_invalid(result: Result, reasons: Sequence[str]) -> Result:
    """A proven violation stays invalid; otherwise any reason (input the checker could not
    judge) makes the result unknown, with the reasons as notes."""
    if reasons:
        result.notes.extend(reasons)
        if result.valid is True:
            result.valid = UNKNOWN
    return result


def merge_validity(verdicts: Iterable[Validity]) -> Validity:
    """false > unknown > true; no verdicts at all is unknown (nothing was proven)."""
    verdicts = list(verdicts)
    if not verdicts:
        return UNKNOWN
    if any(v is False for v in verdicts):
        return False
    if any(v is not True for v in verdicts):
        return UNKNOWN
    return True


def compose(results: Iterable[Result], name: str = "proctor") -> Result:
    """One verdict over several checkers; each result stays available in ``checks``."""
    checks = {result.name: result for result in results}
    verdicts = [r.valid for r in checks.values()]
    counts = {
        "valid": sum(v is True for v in verdicts),
        "invalid": sum(v is False for v in verdicts),
        "unknown": sum(v is not True and v is not False for v in verdicts),
    }
    notes = [f"{n}: {'invalid' if r.valid is False else 'unknown'}" for n, r in checks.items() if r.valid is not True]
    if not checks:
        notes.append("no checker ran")
    return Result(name, merge_validity(verdicts), counts, notes=notes, checks=checks)


def check_safe(name: str, checker: Checker, history: Sequence[Op], ledgers: Ledgers, options: "CheckOptions") -> Result:
    """Run one checker; a crash is a harness error, reported as unknown rather than as a pass."""
    try:
        result = checker(history, ledgers, options)
    except Exception as exc:  # noqa: BLE001 - any crash must become a verdict, not abort the others
        return Result(
            name,
            UNKNOWN,
            notes=[f"checker crashed: {type(exc).__name__}: {exc}"],
            details={"traceback": traceback.format_exc(limit=8)},
        )
    result.name = name
    return result


def summarize(values: Iterable[float]) -> dict[str, float | int | None]:
    """count, p50, p95, p99, max by nearest rank (every quantile is an observed value)."""
    ordered = sorted(values)
    summary: dict[str, float | int | None] = {"count": len(ordered)}
    for label, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
        summary[label] = ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None
    summary["max"] = ordered[-1] if ordered else None
    return summary


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
class CheckOptions:
    """The "options" object of scenario.json; defaults are the strict choice."""

    allow_pending: frozenset[str] = frozenset()
    """Outbox kinds whose still-pending/enqueued rows (no outcome yet) count as accounted for."""
    allow_failed_for_review: frozenset[str] = frozenset()
    """Outbox kinds whose failed_for_review outcome satisfies the effects checker."""
    outcome_deadline_seconds: float | None = None
    """Real seconds from finish to final outcome; None = no deadline."""
    slo: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """{"answer": {"p99": 0.5}, "lane:merit": {"p99": 0.6, "oldest_age": 2}}: real seconds."""
    expect_ops: tuple[str, ...] = ("answer", "finish")
    """Client f's that must have at least one ok; otherwise the run proved nothing."""
    max_rejected_connections: int | None = None
    """Valkey's rejected_connections (maxclients) over the run may not exceed this; None = not checked."""
    max_component_connection_errors: int | None = None
    """Connection errors each stack component may report (its own counters); None = not checked."""
    max_connects_per_process: int | None = None
    """Valkey connections any one stack process may open over the run (pooled: a handful); None = not checked."""
    declared_faults: tuple[DeclaredFault, ...] | None = None
    """scenario.json's top-level "faults" (not an option): what the nemesis was told to do; None = not declared."""
    time_scale: float | None = None
    """scenario.json's "time_scale" (not an option): real seconds per case second, for checkers whose
    limits are in case time (the AI provider's calls per case-minute); None = not declared."""
    ai_calls_per_minute: int | None = None
    """The shared AI limit the stack ran with (scenario.json settings ``ai_calls_per_minute`` /
    ``PROCTOR_AI_CALLS_PER_MINUTE``); None = the seed's 8."""

    @classmethod
    def from_scenario(cls, scenario: Mapping[str, Any]) -> "CheckOptions":
        """The options of a scenario.json document, plus its declared faults."""
        options = cls.from_dict(scenario.get("options"))
        return replace(options, declared_faults=_declared_faults(scenario.get("faults")),
                       time_scale=declared_time_scale(scenario), ai_calls_per_minute=_declared_ai_limit(scenario))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "CheckOptions":
        data = dict(data or {})
        unknown = set(data) - {"allow_pending", "allow_failed_for_review", "outcome_deadline_seconds", "slo", "expect_ops",
                               "max_rejected_connections", "max_component_connection_errors", "max_connects_per_process"}
        if unknown:
            raise OptionsError(f"options: unknown keys {sorted(unknown)}")
        defaults = cls()
        return cls(
            allow_pending=_kinds(data, "allow_pending", defaults.allow_pending),
            allow_failed_for_review=_kinds(data, "allow_failed_for_review", defaults.allow_failed_for_review),
            outcome_deadline_seconds=_deadline(data.get("outcome_deadline_seconds")),
            slo=_slo(data.get("slo", {})),
            expect_ops=tuple(_strings(data, "expect_ops", defaults.expect_ops)),
            max_rejected_connections=_limit(data.get("max_rejected_connections"), "options.max_rejected_connections"),
            max_component_connection_errors=_limit(data.get("max_component_connection_errors"),
                                                   "options.max_component_connection_errors"),
            max_connects_per_process=_limit(data.get("max_connects_per_process"), "options.max_connects_per_process"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "allow_pending": sorted(self.allow_pending),
            "allow_failed_for_review": sorted(self.allow_failed_for_review),
            "outcome_deadline_seconds": self.outcome_deadline_seconds,
            "slo": {key: dict(limits) for key, limits in self.slo.items()},
            "expect_ops": list(self.expect_ops),
            "max_rejected_connections": self.max_rejected_connections,
            "max_component_connection_errors": self.max_component_connection_errors,
            "max_connects_per_process": self.max_connects_per_process,
        }


def _strings(data: Mapping[str, Any], key: str, default: Iterable[str]) -> list[str]:
    value = data.get(key, list(default))
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise OptionsError(f"options.{key}={value!r}: expected a list of strings")
    return value


def _kinds(data: Mapping[str, Any], key: str, default: Iterable[str]) -> frozenset[str]:
    kinds = _strings(data, key, default)
    bad = [k for k in kinds if k not in OUTBOX_KINDS]
    if bad:
        raise OptionsError(f"options.{key}: {bad} are not outbox kinds {OUTBOX_KINDS}")
    return frozenset(kinds)


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise OptionsError(f"{where}={value!r}: expected a number of seconds > 0")
    return float(value)


def _limit(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OptionsError(f"{where}={value!r}: expected a whole number >= 0 (or null)")
    return value


def _deadline(value: Any) -> float | None:
    return None if value is None else _positive(value, "options.outcome_deadline_seconds")


def _slo(value: Any) -> dict[str, dict[str, float]]:
    if not isinstance(value, Mapping):
        raise OptionsError(f"options.slo={value!r}: expected an object")
    slo: dict[str, dict[str, float]] = {}
    for key, limits in value.items():
        if not isinstance(limits, Mapping) or not limits:
            raise OptionsError(f"options.slo.{key}={limits!r}: expected e.g. {{\"p99\": 0.5}}")
        bad = [name for name in limits if name not in SLO_THRESHOLDS]
        if bad:
            raise OptionsError(f"options.slo.{key}: {bad} are not among {SLO_THRESHOLDS}")
        slo[key] = {name: _positive(v, f"options.slo.{key}.{name}") for name, v in limits.items()}
    return slo


def declared_time_scale(scenario: Mapping[str, Any]) -> float | None:
    """scenario.json's time scale (``time_scale``, else ``settings.TIME_SCALE``/``time_scale``);
    None if it declares none; OptionsError naming it if it is not a number > 0."""
    settings = scenario.get("settings") or {}
    value = scenario.get("time_scale", settings.get("TIME_SCALE", settings.get("time_scale")))
    if value is None:
        return None
    try:
        scale = float(value)
    except (TypeError, ValueError):
        raise OptionsError(f"time_scale={value!r}: expected a number") from None
    if not scale > 0:
        raise OptionsError(f"time_scale={value!r}: must be greater than 0")
    return scale


def _declared_ai_limit(scenario: Mapping[str, Any]) -> int | None:
    settings = scenario.get("settings") or {}
    value = settings.get("ai_calls_per_minute", settings.get("PROCTOR_AI_CALLS_PER_MINUTE"))
    if value is None:
        return None
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise OptionsError(f"settings.ai_calls_per_minute={value!r}: expected a whole number >= 1") from None
    if limit < 1:
        raise OptionsError(f"settings.ai_calls_per_minute={value!r}: expected a whole number >= 1")
    return limit


def _declared_faults(value: Any) -> tuple[DeclaredFault, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise OptionsError(f"faults={value!r:.80}: expected a list of faults")
    declared = []
    for fault_id, fault in enumerate(value):
        where = f"faults[{fault_id}]"
        if not isinstance(fault, Mapping):
            raise OptionsError(f"{where}={fault!r:.80}: expected an object")
        for key in ("kind", "target"):
            if not isinstance(fault.get(key), str):
                raise OptionsError(f"{where}.{key}={fault.get(key)!r}: expected a string")
        for key in ("at", "duration"):
            if isinstance(fault.get(key), bool) or not isinstance(fault.get(key), (int, float)):
                raise OptionsError(f"{where}.{key}={fault.get(key)!r}: expected a number of seconds")
        declared.append(DeclaredFault(fault_id, float(fault["at"]), fault["kind"], fault["target"], float(fault["duration"])))
    return tuple(declared)
