"""The shipper's own counters from rsyslog's impstats records (JSON, one per object per interval).

rsyslog reports per queue ``size``, ``enqueued``, ``discarded.full`` and ``discarded.nf``; the
forwarding action's queue is ``to_store queue`` (memory part) and ``to_store queue[DA]`` (its
disk part). From the latest record of each: **queued** = what both parts hold now; **dropped**
= what either part discarded (full, or past its discard mark: once its disk limit is reached the
disk part discards too, which the memory part's counters do not show); **shipped** = what left
the queue otherwise (enqueued into the memory part - dropped - queued): sent and acknowledged
over RELP. The age of the
oldest unshipped line is not among rsyslog's counters: the checker derives it from the store's
ledger against the lines' own times (chaos/checkers/logship.py).
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["ACTION_QUEUE", "DISK_QUEUE", "shipper_counts"]

ACTION_QUEUE = "to_store queue"
DISK_QUEUE = "to_store queue[DA]"


def _latest(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        name = record.get("name")
        if isinstance(name, str):
            latest[name] = record
    return latest


def shipper_counts(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """{queued, shipped, dropped, enqueued, resumed}; {} when rsyslog reported nothing."""
    latest = _latest(records)
    queue = latest.get(ACTION_QUEUE)
    if queue is None:
        return {}
    disk = latest.get(DISK_QUEUE, {})
    action = latest.get("to_store", {})
    queued = int(queue.get("size", 0)) + int(disk.get("size", 0))
    dropped = sum(int(part.get(key, 0)) for part in (queue, disk) for key in ("discarded.full", "discarded.nf"))
    enqueued = int(queue.get("enqueued", 0))
    return {"queued": queued, "shipped": max(0, enqueued - dropped - queued), "dropped": dropped,
            "enqueued": enqueued, "resumed": int(action.get("resumed", 0))}
