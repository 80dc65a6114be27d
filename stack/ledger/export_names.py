"""The names of the exported ledger tables, defined once. Standard library only: the harness's
final read (chaos/snapshot.py) imports them without SQLAlchemy, the admin route validates the
path with them and stack/ledger/exports.py maps each to its reader."""

__all__ = ["AI_LANE_TABLES", "EXPORT_TABLE_NAMES", "STACK_TABLES"]

STACK_TABLES = ("attempts", "answers", "answer_revisions", "outbox", "outcomes", "exams")
AI_LANE_TABLES = ("ai_reservations", "audit_log", "alerts", "lane_state")
"""Issue #11's tables: a deployment without these exports leaves them unread (its AI lane
checkers then say unknown), it does not fail the whole final read."""
EXPORT_TABLE_NAMES = STACK_TABLES + AI_LANE_TABLES
