"""The negative controls and the test-only flag: apart from the product's ``Settings``.

A control makes the stack wrong on purpose, so that a checker can be shown to catch it
(docs/checkers.md). Each is declared here once (variable, parser, help: ``stack.settings_schema``),
travels inside ``Settings.controls`` and through the same environment as every setting (so
``Scenario.settings={"reconciler_enabled": False}`` and ``PROCTOR_RECONCILER=off`` keep working),
and is read once, at start-up, by the one function that turns it into a policy object.
tests/unit/test_boundaries.py names that function for each control and fails on a read anywhere
else: product code never branches on a control.
"""

from __future__ import annotations

from dataclasses import dataclass

from stack.settings_schema import declared, one_of, parse_bool, parse_non_negative_float, setting

__all__ = ["ANSWER_REVISION_RULES", "ANSWER_SINKS", "CONTROLS", "Controls"]

ANSWER_REVISION_RULES = ("highest", "last-arrival", "compacting")
"""PROCTOR_ANSWER_REVISIONS: the highest revision is current (correct), or a negative control."""
ANSWER_SINKS = ("per-answer", "group-commit", "ack-at-enqueue")
"""PROCTOR_ANSWER_SINK values: ack-at-enqueue is a negative control (stack/web/group_commit.py)."""


@dataclass(frozen=True)
class Controls:
    """The switches a scenario flips to show a checker catches a fault; the defaults are the
    correct stack. The selector of each (its policy object) is named in tests/unit/test_boundaries.py."""

    allow_default_secrets: bool = setting("PROCTOR_ALLOW_DEFAULT_SECRETS", False, parse_bool,
        help="accept KNOWN_DEFAULT_SECRETS, **test only**")
    rate_limits: bool = setting("PROCTOR_RATE_LIMITS", True, parse_bool,
        help="off = no request limiter **negative control**")
    reconciler_enabled: bool = setting("PROCTOR_RECONCILER", True, parse_bool,
        help="off = **negative control**")
    relay_mark_early: bool = setting("PROCTOR_RELAY_MARK_EARLY", False, parse_bool,
        help="on = **negative control**: the relay marks a row enqueued before Valkey accepted its job")
    sms_idempotency: bool = setting("PROCTOR_SMS_IDEMPOTENCY", True, parse_bool,
        help="off = **negative control**")
    valkey_fresh_connections: bool = setting("PROCTOR_VALKEY_FRESH_CONNECTIONS", False, parse_bool,
        help="the seed's anti-pattern **negative control**")
    answer_write_behind: float = setting("PROCTOR_ANSWER_WRITE_BEHIND", 0.0, parse_non_negative_float,
        help=">0 = ack first, commit later **negative control**")
    shared_lane: bool = setting("PROCTOR_SHARED_LANE", False, parse_bool,
        help="on = AI jobs join the merit queue (the seed's lane) **negative control**")
    answer_revisions: str = setting("PROCTOR_ANSWER_REVISIONS", "highest", one_of(ANSWER_REVISION_RULES),
        help="last-arrival/compacting = negative controls **negative control**")
    answer_sink: str = setting("PROCTOR_ANSWER_SINK", "per-answer", one_of(ANSWER_SINKS),
        help="per-answer/group-commit; ack-at-enqueue = negative control **negative control**")
    ai_shared_limiter: bool = setting("PROCTOR_AI_SHARED_LIMITER", True, parse_bool,
        help="off = a limiter per worker **negative control**")
    ai_retry_after: bool = setting("PROCTOR_AI_RETRY_AFTER", True, parse_bool,
        help="off = a 429's Retry-After is ignored **negative control**")
    ai_ask_before_replay: bool = setting("PROCTOR_AI_ASK_BEFORE_REPLAY", True, parse_bool,
        help="off = replay without asking the provider **negative control**")


CONTROLS = frozenset(item.name for item in declared(Controls))
"""The names of the controls (``Settings.with_overrides`` routes them into ``Settings.controls``)."""
