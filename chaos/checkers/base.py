"""What every checker returns, how verdicts combine, and how a checker declares its options.

A checker is a pure function ``(history, ledgers, options) -> Result``. Its verdict
``valid`` is True, False, or "unknown" (it could not tell, e.g. a ledger was never
read). Combining verdicts ranks false > unknown > true: one proven violation makes
the run invalid; otherwise anything unproven makes it unknown. Only a run where
every checker proved its invariant is valid.

A checker that found nothing to judge (no revisions in a run that wrote none, no
connection samples) is *n/a* (``Result.na`` holds why): it neither proves nor breaks
anything, so it is counted apart from "valid" and left out of the merge; a run where
every checker is n/a proved nothing and is unknown.

A checker's options are a frozen dataclass in its own module, mixing in ``CheckerOptions``
and declaring each key with ``option(...)`` (docs/checkers.md, "Writing a checker");
``chaos.checkers.options.CheckOptions`` is all of them in one value.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import Field, dataclass, field, fields
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence, Union

from chaos.history import Op
from chaos.ledgers import OUTBOX_KINDS, Ledgers

__all__ = [
    "CheckerOptions",
    "Checker",
    "MAX_EXAMPLES",
    "OptionsError",
    "Result",
    "Show",
    "UNKNOWN",
    "Validity",
    "build_result",
    "check_safe",
    "compose",
    "format_seconds",
    "merge_validity",
    "option",
    "parse_kinds",
    "parse_limit",
    "parse_seconds",
    "parse_strings",
    "show_plain",
    "show_seconds",
    "summarize",
    "unknown_unless_invalid",
]

UNKNOWN: Literal["unknown"] = "unknown"
Validity = Union[bool, Literal["unknown"]]

MAX_EXAMPLES = 8
"""Examples kept per category: enough to debug from, small enough to read (Jepsen keeps 8)."""


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
    na: str | None = None
    """Why there was nothing to check ("n/a"); None when the checker judged something."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "valid": self.valid,
            "counts": self.counts,
            "violations": self.violations,
            "examples": self.examples,
            "notes": self.notes,
        }
        if self.na is not None:
            data["na"] = self.na
        if self.details:
            data["details"] = self.details
        if self.checks:
            data["checks"] = {name: check.to_dict() for name, check in self.checks.items()}
        return data

    @classmethod
    def not_applicable(cls, name: str, reason: str, counts: Mapping[str, Any] | None = None) -> "Result":
        return cls(name, True, counts=dict(counts or {}), notes=[reason], na=reason)

    @classmethod
    def unknown(cls, name: str, notes: Iterable[str], counts: Mapping[str, Any] | None = None) -> "Result":
        return cls(name, UNKNOWN, counts=dict(counts or {}), notes=list(notes))


Checker = Callable[[Sequence[Op], Ledgers, Any], Result]
"""(history, ledgers, options) -> Result; options is CheckOptions, or the checker's own options class."""


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
    judged = [r.valid for r in checks.values() if r.na is None]
    counts = {
        "valid": sum(v is True for v in judged),
        "invalid": sum(v is False for v in judged),
        "unknown": sum(v is not True and v is not False for v in judged),
        "n/a": len(checks) - len(judged),
    }
    notes = [f"{n}: {'invalid' if r.valid is False else 'unknown'}" for n, r in checks.items()
             if r.valid is not True and r.na is None]
    if not checks:
        notes.append("no checker ran")
    elif not judged:
        notes.append("every checker had nothing to check: nothing was proven")
    return Result(name, merge_validity(judged), counts, notes=notes, checks=checks)


def check_safe(name: str, checker: Checker, history: Sequence[Op], ledgers: Ledgers, options: Any) -> Result:
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


Show = Callable[[str, Any, Callable[[float | None], str]], list[str]]
"""How an option appears in report.md: (name, value as in to_dict, seconds -> "real = case") -> lines."""


def show_plain(name: str, value: Any, both: Callable[[float | None], str]) -> list[str]:
    """A list as "a, b" or (none); anything else as itself, None as "not set"."""
    if isinstance(value, list):
        return [f"- {name}: {', '.join(map(str, value)) or '(none)'}"]
    return [f"- {name}: {'not set' if value is None else value}"]


def show_seconds(name: str, value: Any, both: Callable[[float | None], str]) -> list[str]:
    """Real seconds, shown with their case time too (real / TIME_SCALE)."""
    return [f"- {name}: {both(value)}"]


def option(default: Any, parse: Callable[[Any, str], Any], *, dump: Callable[[Any], Any] = lambda v: v,
           show: Show = show_plain) -> Any:
    """A dataclass field that is a key of scenario.json's "options": ``parse(value, "options.<key>")``
    checks and converts (raising OptionsError naming the key), ``dump`` turns it back into JSON,
    ``show`` renders it in report.md. Mutable defaults are copied per instance."""
    metadata = {"parse": parse, "dump": dump, "show": show}
    if isinstance(default, (dict, list, set)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


class CheckerOptions:
    """Mixin of a checker's options dataclass: parsing, JSON and report lines come from its
    ``option`` fields, so each key is written once, where the checker declares it."""

    @classmethod
    def option_fields(cls) -> list[Field]:
        return [f for f in fields(cls) if "parse" in f.metadata]  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Any:
        data = dict(data or {})
        declared = {f.name: f for f in cls.option_fields()}
        unknown = set(data) - set(declared)
        if unknown:
            raise OptionsError(f"options: unknown keys {sorted(unknown)}")
        return cls(**{key: declared[key].metadata["parse"](value, f"options.{key}") for key, value in data.items()})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: f.metadata["dump"](getattr(self, f.name)) for f in self.option_fields()}

    @classmethod
    def report_lines(cls, options: Mapping[str, Any], both: Callable[[float | None], str]) -> list[str]:
        """The options of a report.json (to_dict's shape) as report.md lines, in declaration order."""
        return [line for f in cls.option_fields() if f.name in options
                for line in f.metadata["show"](f.name, options[f.name], both)]


def parse_strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise OptionsError(f"{where}={value!r}: expected a list of strings")
    return tuple(value)


def parse_kinds(value: Any, where: str) -> frozenset[str]:
    """Outbox kinds (merit, narrative, sms)."""
    kinds = parse_strings(value, where)
    bad = [k for k in kinds if k not in OUTBOX_KINDS]
    if bad:
        raise OptionsError(f"{where}: {bad} are not outbox kinds {OUTBOX_KINDS}")
    return frozenset(kinds)


def parse_seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise OptionsError(f"{where}={value!r}: expected a number of seconds > 0")
    return float(value)


def parse_limit(value: Any, where: str) -> int | None:
    """A whole number >= 0, or None for "not checked"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OptionsError(f"{where}={value!r}: expected a whole number >= 0 (or null)")
    return value


def format_seconds(seconds: float | None) -> str:
    """A duration a person can read: 3.4 ms, 0.34 s, 7.5 min, 12 h."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
