"""The AI lane's checkers (issue #11) in the run's checker form ``(history, ledgers, options)``.

The pure checkers take plain rows (chaos/checkers/{provider_limit,billing,paused_calls}.py,
also used by ``proctor audit billing``); these adapters feed them the run folder's final
read: ``ai_effects`` (the provider's invoice), ``ai_reservations``, ``audit_log`` (pause
windows), ``alerts`` and ``lane_state``. A table that was not read makes its checker
unknown; a run that made no AI call is valid with nothing to check (the counts say 0).

provider_limit counts in case time: the window is one case-minute at the run's declared
``time_scale`` (scenario.json), and the limit is the one the stack ran with (settings
``ai_calls_per_minute``, 8 unless a run lifted it on purpose). A run that made AI calls but declares no time scale is
unknown, never judged at a guessed scale.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from chaos.checkers.base import CheckerOptions, OptionsError, Result, unknown_unless_invalid
from chaos.checkers.billing import check_billing
from chaos.checkers.paused_calls import check_paused_calls
from chaos.checkers.provider_limit import NAME as PROVIDER_LIMIT, provider_limit_checker
from chaos.history import Op
from chaos.ledgers import Ledgers

__all__ = [
    "AI_CALLS_PER_CASE_MINUTE",
    "AiLaneOptions",
    "check_ai_billing",
    "check_ai_paused_calls",
    "check_ai_provider_limit",
    "declared_ai_limit",
    "declared_time_scale",
]

AI_CALLS_PER_CASE_MINUTE = 8
"""The seed's shared limit; mirrors stack.config.CASE_PROVIDER_CALLS_PER_MINUTE (analysis imports no stack code)."""

_NOTHING = "no AI provider call in this run: nothing to check"


@dataclass(frozen=True)
class AiLaneOptions(CheckerOptions):
    """Not "options" keys, so plain fields: CheckOptions.from_scenario fills them from scenario.json."""

    time_scale: float | None = None
    """scenario.json's "time_scale": real seconds per case second, to place the case-minute window; None = not declared."""
    ai_calls_per_minute: int | None = None
    """The shared AI limit the stack ran with (settings ``ai_calls_per_minute``); None = the seed's 8."""


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


def declared_ai_limit(scenario: Mapping[str, Any]) -> int | None:
    """The settings' shared AI limit (``ai_calls_per_minute`` / ``PROCTOR_AI_CALLS_PER_MINUTE``), checked."""
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


def _rows(table: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    return None if table is None else [asdict(row) for row in table]


def _nothing_noted(result: Result, effects: Sequence[Any] | None) -> Result:
    if effects is not None and not effects and result.valid is True:
        result.notes.append(_NOTHING)
    return result


def check_ai_provider_limit(history: Sequence[Op], ledgers: Ledgers, options: AiLaneOptions) -> Result:
    """No sliding case-minute over the provider's ledger holds more than 8 calls."""
    effects = ledgers.ai_effects
    if effects is None:
        return Result.unknown(PROVIDER_LIMIT, ledgers.missing("ai_effects"))
    if not effects:
        return Result(PROVIDER_LIMIT, True, counts={"over_limit": 0, "calls": 0}, notes=[_NOTHING])
    if options.time_scale is None:
        return Result.unknown(PROVIDER_LIMIT, ["scenario.json declares no time_scale: a case-minute's length "
                                               "is unknown, so the limit window cannot be placed"],
                              counts={"calls": len(effects)})
    window = 60.0 * options.time_scale
    limit = options.ai_calls_per_minute or AI_CALLS_PER_CASE_MINUTE  # a run may lift the limiter on purpose
    result = provider_limit_checker(limit, window)(history, ledgers, options)
    result.counts["calls"] = len(effects)
    result.details.update(limit=limit, window_seconds=window, time_scale=options.time_scale)
    return result


def check_ai_billing(history: Sequence[Op], ledgers: Ledgers, options: AiLaneOptions) -> Result:
    """reservations = completed + released + pending, and they account for every provider charge."""
    result = check_billing(_rows(ledgers.ai_reservations), ledgers.ai_effects, _rows(ledgers.ai_reservations_after))
    return _nothing_noted(result, ledgers.ai_effects)


def check_ai_paused_calls(history: Sequence[Op], ledgers: Ledgers, options: AiLaneOptions) -> Result:
    """No new provider call while the AI lane was paused; alerts and the final lane state reported."""
    audit = None if ledgers.audit_log is None else [
        {"at": row.at, "action": row.action, "detail": row.detail if isinstance(row.detail, dict) else {}}
        for row in ledgers.audit_log]
    result = check_paused_calls(audit, ledgers.ai_effects, _rows(ledgers.ai_reservations))
    if result.valid == "unknown":
        return result
    alerts = [row for row in ledgers.alerts or () if row.lane == "ai"]
    result.counts["alerts"] = len(alerts)
    result.details["alert_kinds"] = sorted({row.kind for row in alerts})
    paused = [row for row in ledgers.lane_state or () if row.lane == "ai" and row.paused]
    if paused:
        result.notes.append(f"lane ai still paused at the final read: {paused[0].reason}")
    missing = ledgers.missing("alerts", "lane_state")
    return _nothing_noted(unknown_unless_invalid(result, missing), ledgers.ai_effects)
