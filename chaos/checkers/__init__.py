"""Invariant checkers: pure functions (history, ledgers, options) -> Result.

One checker per module, with its options and any report lines of its own beside it;
``CHECKERS`` lists them in report order, ``DETAIL_SECTIONS`` the checkers that render
their details in report.md, and ``run_checkers`` runs them all (each crash-safe) and
composes one verdict. What each proves, and how to add one: docs/checkers.md.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from chaos.checkers.ailane import check_ai_billing, check_ai_paused_calls, check_ai_provider_limit
from chaos.checkers.answer_reads import check_answer_reads
from chaos.checkers.answers import check_answers
from chaos.checkers import connections, latency
from chaos.checkers.base import (
    UNKNOWN,
    Checker,
    OptionsError,
    Result,
    check_safe,
    compose,
)
from chaos.checkers.connections import check_connections
from chaos.checkers.duplicate_charges import check_duplicate_charges
from chaos.checkers.effects import check_effects
from chaos.checkers.egress import check_egress
from chaos.checkers.logship import check_logship
from chaos.checkers.faults import check_faults
from chaos.checkers.final_answers import check_final_answers
from chaos.checkers.jobs import check_jobs
from chaos.checkers.latency import check_latency
from chaos.checkers.options import CheckOptions
from chaos.checkers.payloads import check_payloads
from chaos.checkers.retry_after import check_retry_after
from chaos.checkers.revisions import check_revisions
from chaos.checkers.stats import check_stats
from chaos.history import Op
from chaos.ledgers import Ledgers

__all__ = [
    "CHECKERS",
    "CheckOptions",
    "Checker",
    "DETAIL_SECTIONS",
    "OptionsError",
    "Result",
    "UNKNOWN",
    "check_ai_billing",
    "check_ai_paused_calls",
    "check_ai_provider_limit",
    "check_answer_reads",
    "check_answers",
    "mark_vacuous",
    "check_connections",
    "check_duplicate_charges",
    "check_effects",
    "check_egress",
    "check_logship",
    "check_faults",
    "check_final_answers",
    "check_jobs",
    "check_latency",
    "check_payloads",
    "check_retry_after",
    "check_revisions",
    "check_safe",
    "check_stats",
    "compose",
    "run_checkers",
]

CHECKERS: dict[str, Checker] = {
    "stats": check_stats,
    "faults": check_faults,
    "answers": check_answers,
    "revisions": check_revisions,
    "final_answers": check_final_answers,
    "answer_reads": check_answer_reads,
    "effects": check_effects,
    "jobs": check_jobs,
    "payloads": check_payloads,
    "latency": check_latency,
    "connections": check_connections,
    "provider_limit": check_ai_provider_limit,
    "duplicate_charges": check_duplicate_charges,
    "billing": check_ai_billing,
    "paused_calls": check_ai_paused_calls,
    "retry_after": check_retry_after,
    "egress": check_egress,
    "logship": check_logship,
}


DETAIL_SECTIONS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "latency": latency.render_details,
    "connections": connections.render_details,
}
"""Checker name -> its report.md lines from the result's ``details`` (after counts, notes, examples)."""


def run_checkers(history: Sequence[Op], ledgers: Ledgers, options: CheckOptions) -> Result:
    """Every checker, each crash-safe, composed: false > unknown > true (n/a left out)."""
    return compose(mark_vacuous(check_safe(name, checker, history, ledgers, options))
                   for name, checker in CHECKERS.items())


def mark_vacuous(result: Result) -> Result:
    """A valid result whose every count is 0 examined nothing: it is n/a, not "valid"."""
    counts = list(result.counts.values())
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in counts)
    if result.valid is True and result.na is None and counts and numbers and not any(counts) and not result.examples:
        result.na = "every count is 0: this run held nothing for it to check"
    return result
