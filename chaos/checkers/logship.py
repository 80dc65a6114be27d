"""Log shipping: every produced log line reached the store or was counted dropped, no more
duplicates than RELP's at-least-once allows, and no canary reached the store (issue #26,
docs/log-shipping.md).

Inputs (the final read, stack/embedded/logship.py): ``log_produced`` (each component log's
complete lines, by start offset, read before the shipper was drained), ``log_lines`` (the
store's own ledger: file, offset, the line's time, when it arrived) and ``shipper_stats``
(rsyslog's impstats counters). With ``options.log_canaries`` set:

- **uncounted_loss**: produced - distinct lines shipped - drops the shipper counted - lines
  its counters show still buffered > 0. A bounded buffer may drop; a drop nobody counted is
  the failure (the negative control keeps no counters). A line still buffered is delayed,
  not lost: Debian's rsyslog 8.2302 leaves up to a high watermark of lines in the disk part
  of its queue until more traffic arrives (rsyslog issue #2646, fixed upstream in 2026), and
  saves them on shutdown (``queue.saveOnShutdown``); it is counted and reported apart;
- **excess_duplicates**: RELP re-sends what was unacknowledged when a connection broke, so a
  line may arrive twice; more than ``RELP_WINDOW`` x (reconnects + 1) duplicates is more than
  that guarantee explains;
- **canary_leaked**: a stored line holds a canary (redaction runs before shipping).

Measured, not judged: the shipping delay of each line (arrival - the line's own time), whose
maximum is the age the oldest unshipped line reached; rsyslog does not report it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from chaos.checkers.base import CheckerOptions, Result, build_result, option, parse_strings, summarize
from chaos.history import Op
from chaos.ledgers import Ledgers

__all__ = ["LogshipOptions", "NAME", "REDACTED_MARK", "RELP_WINDOW", "check_logship", "shipping_delays"]

NAME = "logship"
REDACTED_MARK = "[redacted by the shipper"
"""How stack/logship/rsyslog.py's redaction replaces a line (counted: a canary check whose
lines never arrived would prove nothing)."""
RELP_WINDOW = 128
"""librelp's default window: at most this many messages unacknowledged per connection."""


def _parse_canaries(value: Any, where: str) -> tuple[str, ...] | None:
    return None if value is None else parse_strings(value, where)


@dataclass(frozen=True)
class LogshipOptions(CheckerOptions):
    # Strings that must never reach the log store (a canary answer, a canary access code);
    # None: this run ships no logs (n/a).
    log_canaries: tuple[str, ...] | None = option(None, _parse_canaries, dump=lambda v: None if v is None else list(v))


def shipping_delays(ledgers: Ledgers) -> list[float]:
    delays = []
    for line in ledgers.log_lines or ():
        try:
            written = datetime.fromisoformat(line.line_time or "").timestamp()
        except ValueError:
            continue
        if line.received_at is not None:
            delays.append(round(line.received_at - written, 6))
    return delays


def check_logship(history: Sequence[Op], ledgers: Ledgers, options: LogshipOptions) -> Result:
    canaries = options.log_canaries
    if canaries is None:
        return Result.not_applicable(NAME, "this run ships no logs (options.log_canaries)")
    tables = ("log_lines", "log_produced", "shipper_stats")
    if any(getattr(ledgers, table) is None for table in tables):
        return Result.unknown(NAME, ledgers.missing(*tables))
    produced = {(row.file, str(offset)) for row in ledgers.log_produced for offset in row.offsets}
    arrivals = Counter((line.file, str(line.offset)) for line in ledgers.log_lines)
    shipped = produced & set(arrivals)
    [stats] = ledgers.shipper_stats or [None]
    counted = bool(stats and stats.counted)
    dropped = int(stats.dropped or 0) if counted and stats else 0
    resumed = int(stats.resumed or 0) if counted and stats else 0
    buffered = int(stats.queued or 0) if counted and stats else 0
    lost = len(produced) - len(shipped) - dropped - buffered
    missing = sorted(produced - shipped)
    uncounted = [{"lines_neither_shipped_nor_counted": lost, "dropped_counted": dropped, "still_buffered": buffered,
                  "counters_kept": counted,
                  "first_missing": [f"{file}@{offset}" for file, offset in missing[:5]]}] if lost > 0 else []
    duplicates = sum(n - 1 for n in arrivals.values() if n > 1)
    allowed = RELP_WINDOW * (resumed + 1)
    excess = [{"duplicates": duplicates, "allowed": allowed, "reconnects": resumed}] if duplicates > allowed else []
    leaked = [{"file": line.file, "offset": line.offset, "canary": canary} for line in ledgers.log_lines
              for canary in canaries if canary in line.msg]
    redacted = sum(1 for line in ledgers.log_lines if line.msg.startswith(REDACTED_MARK))
    if lost < 0:
        notes_extra = [f"{-lost} more drop(s) or buffered line(s) counted than lines missing: "
                       "lines written after the snapshot"]
    else:
        notes_extra = []
    delays = shipping_delays(ledgers)
    notes = [f"produced {len(produced)} = shipped {len(shipped)} + dropped (counted) {dropped}"
             + (f" + still buffered (counted) {buffered}" if buffered else "")
             + (f" + {lost} unaccounted" if lost else ""),
             f"RELP is at-least-once: {duplicates} duplicate(s), at most {allowed} allowed ({resumed} reconnect(s))"]
    notes += notes_extra
    if not counted:
        notes.append("the shipper kept no drop counters (impstats off)")
    if delays:
        notes.append(f"oldest unshipped line reached {max(delays):.3f} s (arrival - the line's own time)")
    return build_result(
        NAME,
        bad={"uncounted_loss": uncounted, "excess_duplicates": excess, "canary_leaked": leaked},
        counts={"produced": len(produced), "shipped": len(shipped), "dropped": dropped, "buffered": buffered,
                "duplicates": duplicates,
                "stored": sum(arrivals.values()), "after_snapshot": len(set(arrivals) - produced), "redacted": redacted},
        details={"delay": summarize(delays), "canaries": list(canaries), "counters_kept": counted},
        notes=notes,
    )
