"""Bounds that follow from the fault schedule, derived per run from what the run measured.

A fixed wall-clock limit in a verdict fails a correct stack on a slower machine. So
a bound that the kills explain is derived at analysis time, from ``scenario.json``
(settings, workers per lane), the history (when each worker was killed and when it
was back ready, measured by the process nemesis) and the outbox export (what one
job costs). ``proctor check RUN_DIR`` re-derives the same numbers offline.

Terms, all real seconds (wall clock, as the ledgers record them):

- **kill window** of a worker: ``killed_at`` -> ``ready_at`` (the nemesis logged both;
  ``ready_at`` is when the restarted worker had set its liveness key, before its
  first dequeue). A window that never ended makes the bound underivable.
- **failover window** of a worker (a Valkey primary killed or cut off, ``chaos/nemesis/failover.py``):
  every client worker is down from the kill until it measurably serves the new primary again
  (``serving``: its queue connection there and a liveness beat written after the measured
  ``+switch-master``; this includes its restart when it exited on the lost Valkey); such a
  window counts as one kill of that worker (its job in flight is re-enqueued after a detection).
- **link window** (a toxic on a Valkey link the job path runs through, ``LINK_STALLS_JOBS``:
  the workers' link, the relay's, or a node's behind the Sentinels): from the toxic's
  fault-start to its fault-end in the history (run time, placed on the wall clock by
  ``history_origin``), one window of each lane taking down all its workers at once: no job of
  any lane moves through a silenced or resetting link, and a job in flight may be orphaned
  (one detection per window). A toxic on ``valkey_web`` is not one: the web's fast-path
  enqueue then fails over to the relay's next pass, which ``relay_interval`` already covers.
- **restart window** of a worker: a crash restart the nemesis did not cause (an RQ worker
  may exit on a Valkey error, and its supervisor or engine brings it back, with backoff):
  from the last counter line of its previous process to the first of its next
  (``connections/<worker>.<pid>.jsonl``, chaos/observe/valkey_stats.py ``process_lifetimes``);
  counted as one kill of that worker. A restart inside one of the nemesis's own kill or
  failover windows of that worker is that window's, not a second one.
- **all-down** time of a lane: the longest stretch in which every worker of the lane
  sat in a kill window (0 when a redundant worker always served).
- **service** S of a lane: the median queue-to-done time (``done_at - enqueued_at``)
  of the lane's jobs enqueued outside its kill windows: what a job costs a free
  worker (fork, TLS, work). The median is untouched by a stall that hits fewer than
  half the jobs, so a stall cannot excuse itself.
- **backlog**: jobs of the lane created during a cluster of kill windows (windows
  closer than one detection apart are one cluster): the work an outage leaves behind,
  drained at S per job by (pessimistically) one worker. The deadline takes the cluster
  that costs a job most (span, kills and backlog together), the merit bound the
  largest backlog of clusters closer than a queue drain apart.
- **queue ahead** Q: the most jobs still ahead of an arriving job when the lane is replayed
  as one FIFO server at its measured pace S, from the jobs' creation times, serving nothing
  during any of the lane's windows above, and paying a provider fault's declared slowdown
  (``latency_seconds`` + ``delay_after_effect_seconds`` of a ``provider`` fault on the lane's
  provider) for each job it starts inside that fault: a lane whose jobs arrive faster than it
  drains queues up with no kill at all (``valkey_failover``'s slowed AI calls, 2 a second
  against about 1.4; a CI run saw narratives wait 11.5 s behind 16 others). The backlog
  term of both bounds is max(backlog, Q). The replay uses only the creation times, the
  median pace and the fault schedule, so a stall the schedule does not explain (a frozen
  worker, a frozen relay) still exceeds the bound.
- **burst** B: the most jobs of the lane created within any S-long window: how many
  can arrive ahead of one another while a job is served.
- **detection**: ``liveness_ttl + 2 * relay_interval``: a job the kill interrupted is
  re-enqueued once its worker's liveness key expired, at the next relay pass (one
  more pass of slack); paid once per kill in the cluster.

Bounds (each reported with its terms):

- ``slo.merit.oldest_age`` = all-down + (1 + B + max(backlog, Q)) * S  (merit lane)
- ``outcome_deadline_seconds`` = max over lanes of
  relay_interval + cluster span + kills * detection + (1 + B + max(backlog, Q)) * S

The deadline is one value for every lane, the largest lane's: a lane with no window of its
own has a bound of a few median service times and no slack for its tail (a CPU hog triples
a job now and then), so a deadline per lane would need a measured tail term that a stall
cannot excuse; the per-lane values are reported, not applied.

A scenario asks for them in scenario.json: ``"derive_bounds": ["outcome_deadline_seconds",
"slo.merit.oldest_age"]``; a derived value replaces the option of that name.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from chaos.history import NEMESIS, Op
from chaos.ledgers import LANE_OF_KIND, OutboxRow
from stack.components import LANES, worker_from_name

__all__ = [
    "DERIVABLE",
    "KillWindow",
    "SlowWindow",
    "apply_bounds",
    "bounds_markdown",
    "burst",
    "derive_bounds",
    "failover_windows",
    "kill_windows",
    "link_windows",
    "queue_ahead",
    "restart_windows",
    "service_time",
    "slow_windows",
    "underivable_notes",
]

DEADLINE = "outcome_deadline_seconds"
MERIT_OLDEST = "slo.merit.oldest_age"
DERIVABLE = (DEADLINE, MERIT_OLDEST)
FAILOVER_KINDS = ("failover", "partition")
"""chaos/nemesis/failover.py's faults: the primary killed, or cut off."""


LINK_STALLS_JOBS = ("valkey_workers", "valkey_relay", "valkey_node_")
"""Valkey links (or prefixes) whose toxic stalls every lane; see the module doc."""

PROVIDER_LANES = {"ai_provider": "ai", "sms_gateway": "sms"}
"""The fake provider each lane's jobs call: a ``provider`` fault on it slows that lane."""
SLOWING_KNOBS = ("latency_seconds", "delay_after_effect_seconds")
"""A provider fault's knobs that add to every call it answers (stack/providers/faults.py)."""


@dataclass(frozen=True)
class SlowWindow:
    """A provider fault that adds ``extra`` seconds to each job of ``lane`` started inside it."""

    lane: str
    start: float  # wall clock
    end: float
    extra: float


@dataclass(frozen=True)
class KillWindow:
    target: str
    lane: str
    start: float  # wall clock: killed
    end: float | None  # wall clock: back ready; None = never ready again
    lane_wide: bool = False  # every worker of the lane down at once (a link window)


def kill_windows(history: Iterable[Op]) -> list[KillWindow]:
    """Worker kills with their wall-clock start and measured ready time, from nemesis ops."""
    starts: dict[Any, dict[str, Any]] = {}
    windows: list[KillWindow] = []
    for op in history:
        value = op.value if isinstance(op.value, dict) else {}
        if op.process == NEMESIS and op.f == "fault-end" and value.get("kind") in FAILOVER_KINDS:
            windows += failover_windows(value)
            continue
        if op.process != NEMESIS or value.get("kind") != "kill" or not str(value.get("target", "")).startswith("worker_"):
            continue
        if op.f == "fault-start" and isinstance(value.get("killed_at"), (int, float)):
            starts[value.get("fault_id")] = value
        elif op.f == "fault-end" and value.get("fault_id") in starts:
            start = starts.pop(value.get("fault_id"))
            ready = value.get("ready_at") if value.get("ready") else None
            windows.append(_window(start, ready))
    windows += [_window(start, None) for start in starts.values()]
    return sorted(windows, key=lambda w: w.start)


def failover_windows(end: Mapping[str, Any]) -> list[KillWindow]:
    """A failover's fault-end as one window per worker: the kill to the worker's measured return
    to service on the new primary (``serving``: a queue connection there and a liveness beat
    written after the switch; None when it never served: the bound is underivable).

    Not its first connection (``first_success``): a worker that lost Valkey for a whole liveness
    TTL exits and is restarted, and under a partition the exiting process reconnects first
    (a run: every worker connected 8.13 s after the cut, served again from 11.6 s). A
    fault-end recorded before ``serving`` was measured falls back to ``first_success``."""
    killed_at = end.get("killed_at")
    if not isinstance(killed_at, (int, float)):
        return []
    measured = "serving" in end
    back = (end.get("serving") if measured else end.get("first_success")) or {}
    missing = end.get("never_serving") if measured else end.get("never_back")
    workers = sorted(n for n in {*back, *(missing or [])} if n.startswith("worker_"))
    windows = []
    for name in workers:
        lane = worker_from_name(name).lane
        assert lane is not None
        at = back.get(name)
        windows.append(KillWindow(name, lane, float(killed_at), float(at) if isinstance(at, (int, float)) else None))
    return windows


def link_windows(history: Iterable[Op], origin: float) -> list[KillWindow]:
    """Toxics on the links of ``LINK_STALLS_JOBS``: per toxic, one lane-wide window of each lane,
    from its fault-start to its fault-end (run time + ``origin``; never ended: end None)."""
    starts: dict[Any, tuple[str, float]] = {}
    spans: list[tuple[str, float, float | None]] = []
    for op in history:
        value = op.value if isinstance(op.value, dict) else {}
        link = str(value.get("target", ""))
        if op.process != NEMESIS or value.get("kind") != "toxic" or not link.startswith(LINK_STALLS_JOBS):
            continue
        if op.f == "fault-start":
            starts[value.get("fault_id")] = (link, origin + op.time)
        elif op.f == "fault-end" and value.get("fault_id") in starts:
            link, start = starts.pop(value.get("fault_id"))
            spans.append((link, start, origin + op.time))
    spans += [(link, start, None) for link, start in starts.values()]
    return sorted((KillWindow(link, lane, start, end, lane_wide=True) for link, start, end in spans for lane in LANES),
                  key=lambda w: w.start)


def slow_windows(history: Iterable[Op], origin: float) -> list[SlowWindow]:
    """``provider`` faults that slow their lane's calls (``SLOWING_KNOBS`` in the fault's params),
    fault-start to fault-end (run time + ``origin``); one never ended lasts to the last op."""
    starts: dict[Any, tuple[str, float, float]] = {}
    windows: list[SlowWindow] = []
    last = 0.0
    for op in history:
        last = max(last, op.time)
        value = op.value if isinstance(op.value, dict) else {}
        lane = PROVIDER_LANES.get(str(value.get("target", "")))
        if op.process != NEMESIS or value.get("kind") != "provider" or lane is None:
            continue
        if op.f == "fault-start":
            extra = sum(float(value.get(k) or 0.0) for k in SLOWING_KNOBS)
            if extra > 0:
                starts[value.get("fault_id")] = (lane, origin + op.time, extra)
        elif op.f == "fault-end" and value.get("fault_id") in starts:
            lane, start, extra = starts.pop(value.get("fault_id"))
            windows.append(SlowWindow(lane, start, origin + op.time, extra))
    windows += [SlowWindow(lane, start, origin + last, extra) for lane, start, extra in starts.values()]
    return sorted(windows, key=lambda w: w.start)


def queue_ahead(created: Sequence[float], per_job: float, down: Sequence[tuple[float, float]],
                slow: Sequence[SlowWindow] = ()) -> int:
    """Most jobs still ahead of an arriving one when the lane is replayed as one FIFO server:
    each job costs ``per_job`` (plus the ``extra`` of a slow window it starts in), none is
    served inside a ``down`` span, and a job a span interrupts starts again after it."""
    spans = _merged(down)
    finishes: list[float] = []
    free, most, served = float("-inf"), 0, 0
    for at in sorted(created):
        while served < len(finishes) and finishes[served] <= at:
            served += 1
        most = max(most, len(finishes) - served)
        start = _outside(max(at, free), spans)
        finish = _served_by(start, per_job, slow)
        while (hit := next((s for s in spans if start < s[0] < finish), None)) is not None:
            start = hit[1]
            finish = _served_by(start, per_job, slow)
        free = finish
        finishes.append(finish)
    return most


def _served_by(start: float, per_job: float, slow: Sequence[SlowWindow]) -> float:
    """When a job started at ``start`` is done: its pace plus the slowdown of a window it starts in."""
    return start + per_job + sum(w.extra for w in slow if w.start <= start < w.end)


def _merged(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping spans joined; an empty or reversed one dropped (it downs nothing, and
    ``queue_ahead``'s restart after a span must move forward to end)."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(span for span in spans if span[1] > span[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _outside(at: float, spans: Sequence[tuple[float, float]]) -> float:
    """``at``, or the end of the (merged) span it falls in."""
    return next((end for start, end in spans if start <= at < end), at)


def restart_windows(lifetimes: Mapping[str, Sequence[tuple[float, float]]],
                    nemesis_windows: Sequence[KillWindow]) -> list[KillWindow]:
    """Each worker's crash restarts (a next process's first counter line after its previous
    one's last), except those inside one of the nemesis's windows of that worker."""
    windows = []
    for name, spans in sorted(lifetimes.items()):
        if not name.startswith("worker_"):
            continue
        lane = worker_from_name(name).lane
        assert lane is not None
        for (_, gone), (back, _) in zip(spans, spans[1:]):
            if back <= gone:
                # The successor wrote before its predecessor's last line (a horse that outlived its
                # exiting worker, measured: 0.5 s under a partition): no gap the counters can show.
                continue
            if not any(w.target == name and w.start <= back and (w.end is None or gone <= w.end) for w in nemesis_windows):
                windows.append(KillWindow(name, lane, gone, back))
    return windows


def _window(start: Mapping[str, Any], ready_at: Any) -> KillWindow:
    target = str(start["target"])
    lane = worker_from_name(target).lane
    assert lane is not None  # a worker always has one (Component refuses a worker without)
    return KillWindow(target, lane, float(start["killed_at"]),
                      float(ready_at) if isinstance(ready_at, (int, float)) else None)


def derive_bounds(scenario: Mapping[str, Any], history: Sequence[Op], outbox: Sequence[OutboxRow] | None,
                  lifetimes: Mapping[str, Sequence[tuple[float, float]]] | None = None) -> dict[str, Any]:
    """{name: {"value": seconds or None, "formula": str, "terms": {...}, "note": str}} for each bound asked for.

    ``lifetimes``: each component's processes (``process_lifetimes``), for the restart windows."""
    wanted = scenario.get("derive_bounds") or []
    unknown = [name for name in wanted if name not in DERIVABLE]
    if unknown:
        raise ValueError(f"scenario.json derive_bounds: {unknown} are not among {list(DERIVABLE)}")
    if not wanted:
        return {}
    settings = scenario.get("settings") or {}
    ttl, relay = float(settings.get("liveness_ttl", 3.0)), float(settings.get("relay_interval", 0.5))
    detection = ttl + 2 * relay
    windows = kill_windows(history)
    origin = _history_origin(scenario)
    links = link_windows(history, origin) if origin is not None else []
    windows = sorted(windows + restart_windows(lifetimes or {}, windows) + links, key=lambda w: w.start)
    workers = {lane: int((scenario.get("stack") or {}).get(f"{lane}_workers", 1)) for lane in LANES}
    slow = slow_windows(history, origin) if origin is not None else []
    lanes = {lane: _lane_terms(lane, workers[lane], windows, outbox or [], detection, slow) for lane in LANES}
    shared = {"liveness_ttl": ttl, "relay_interval": relay, "detection": detection,
              "kills": [[w.target, w.start, w.end] for w in windows if not w.lane_wide],
              "link_windows": sorted({(w.target, w.start, w.end) for w in windows if w.lane_wide}, key=lambda w: w[1])}
    derived: dict[str, Any] = {}
    if DEADLINE in wanted:
        derived[DEADLINE] = _deadline(lanes, relay, shared)
    if MERIT_OLDEST in wanted:
        derived[MERIT_OLDEST] = _merit_oldest(lanes["merit"])
    return derived


def _history_origin(scenario: Mapping[str, Any]) -> float | None:
    """The wall clock of the history's time 0: without it no fault window can be placed (none is counted)."""
    origin = scenario.get("history_origin")
    return float(origin) if isinstance(origin, (int, float)) else None


def _lane_terms(lane: str, workers: int, windows: Sequence[KillWindow], outbox: Sequence[OutboxRow],
                detection: float, slow: Sequence[SlowWindow] = ()) -> dict[str, Any]:
    mine = [w for w in windows if w.lane == lane]
    if any(w.end is None for w in mine):
        never = next(w for w in mine if w.end is None)
        what = f"a toxic on {never.target} never ended" if never.lane_wide else f"a killed {lane} worker never came back ready"
        return {"lane": lane, "error": what}
    spans = [(w.start, w.end) for w in mine if w.end is not None]  # all of them, after the check above
    # a lane-wide window downs every worker at once: one span per worker for the all-down time
    down = [(w.start, w.end) for w in mine for _ in range(workers if w.lane_wide else 1) if w.end is not None]
    rows = [r for r in outbox if LANE_OF_KIND.get(r.kind) == lane]
    if not rows:
        return {"lane": lane, "jobs": 0}  # nothing of this lane to bound
    per_job, measured_from = service_time(rows)
    if per_job is None:
        return {"lane": lane, "error": f"no done {lane} job to measure the service time from"}
    created = sorted(r.created_at for r in rows if r.created_at is not None)
    arrivals = burst(created, per_job * workers)
    queue_backlog = max((c["backlog"] for c in _clusters(spans, (workers + arrivals) * per_job, created)), default=0)
    # The cluster that costs a job the most, not merely the longest: a shorter one with more
    # kills or more jobs behind it can hold a job longer.
    worst = max(_clusters(spans, detection, created), default={"span": 0.0, "kills": 0, "backlog": 0},
                key=lambda c: c["span"] + c["kills"] * detection + c["backlog"] * per_job)
    ahead = queue_ahead(created, per_job, spans, [w for w in slow if w.lane == lane])
    return {"lane": lane, "workers": workers, "all_down": round(_all_down(down, workers), 3),
            "per_job": round(per_job, 4), "per_job_from": measured_from, "burst": arrivals,
            "queue_backlog": max(queue_backlog, ahead), "backlog": max(worst["backlog"], ahead),
            "cluster_backlog": worst["backlog"], "queue_ahead": ahead,
            "cluster_span": worst["span"], "cluster_kills": worst["kills"]}


def service_time(rows: Sequence[OutboxRow]) -> tuple[float | None, str]:
    """Seconds the lane takes per job: the median gap between consecutive completions while
    the next job was already waiting (a busy lane drains one job per gap), else, for a lane
    that never queued, the median queue-to-done time (then that is the service time)."""
    done = sorted((r for r in rows if r.status == "done" and r.done_at is not None and r.enqueued_at is not None),
                  key=lambda r: r.done_at)  # type: ignore[arg-type, return-value]
    if not done:
        return None, "no done job"
    gaps = [b.done_at - a.done_at for a, b in zip(done, done[1:])  # type: ignore[operator]
            if b.enqueued_at <= a.done_at]  # type: ignore[operator]
    if gaps:
        return statistics.median(gaps), f"median of {len(gaps)} completion gaps while jobs waited"
    return statistics.median(r.done_at - r.enqueued_at for r in done), f"median queue-to-done of {len(done)} jobs"  # type: ignore[operator]


def _all_down(spans: Sequence[tuple[float, float]], workers: int) -> float:
    """Longest stretch in which ``workers`` kill windows of the lane overlap (nobody serving)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])  # a return sorts first
    down, since, longest = 0, 0.0, 0.0
    for at, change in events:
        if change < 0 and down >= workers:
            longest = max(longest, at - since)
        down += change
        if change > 0 and down == workers:
            since = at
    return longest


def _clusters(spans: Sequence[tuple[float, float]], gap: float, created: Sequence[float]) -> list[dict[str, Any]]:
    """Chains of kill windows (in start order) less than ``gap`` apart: each one's span, kills,
    and the jobs created inside it (the backlog it leaves)."""
    chains: list[list[tuple[float, float]]] = []
    for start, end in spans:
        if chains and start <= max(e for _, e in chains[-1]) + gap:
            chains[-1].append((start, end))
        else:
            chains.append([(start, end)])
    clusters = []
    for chain in chains:
        start, end = chain[0][0], max(e for _, e in chain)
        clusters.append({"span": round(end - start, 3), "kills": len(chain),
                         "backlog": sum(1 for t in created if start <= t <= end)})
    return clusters


def burst(created: Sequence[float], window: float) -> int:
    """Most creations (sorted times) within any ``window``-long interval (two pointers over sorted times)."""
    most, left = 0, 0
    for right, at in enumerate(created):
        while at - created[left] > window:
            left += 1
        most = max(most, right - left + 1)
    return most


def _merit_oldest(merit: Mapping[str, Any]) -> dict[str, Any]:
    formula = "all_down + (workers + burst + queue_backlog) * per_job; queue_backlog = max(clusters', queue_ahead)"
    if "per_job" not in merit:
        return {"value": None, "formula": formula, "terms": dict(merit), "note": merit.get("error", "no merit jobs")}
    value = merit["all_down"] + (merit["workers"] + merit["burst"] + merit["queue_backlog"]) * merit["per_job"]
    return {"value": round(value, 3), "formula": formula, "terms": dict(merit)}


def _deadline(lanes: Mapping[str, Mapping[str, Any]], relay: float, shared: Mapping[str, Any]) -> dict[str, Any]:
    formula = ("max over lanes: relay_interval + cluster_span + cluster_kills * detection"
               " + (workers + burst + backlog) * per_job; backlog = max(cluster_backlog, queue_ahead)")
    errors = [t["error"] for t in lanes.values() if "error" in t]
    per_lane = {}
    for lane, terms in lanes.items():
        if "per_job" in terms:
            drain = (terms["workers"] + terms["burst"] + terms["backlog"]) * terms["per_job"]
            per_lane[lane] = round(relay + terms["cluster_span"] + terms["cluster_kills"] * shared["detection"] + drain, 3)
    terms = {**shared, "lanes": {lane: dict(t) for lane, t in lanes.items()}, "per_lane": per_lane}
    if errors or not per_lane:
        return {"value": None, "formula": formula, "terms": terms, "note": "; ".join(errors) or "no jobs at all"}
    return {"value": max(per_lane.values()), "formula": formula, "terms": terms}


def underivable_notes(derived: Mapping[str, Any]) -> list[str]:
    """One note per bound the run asked for but could not derive: the verdict is then unknown.

    Leaving such a bound out would silently drop its check (a killed worker that never came
    back makes the merit bound underivable, and with two merit workers nothing else would
    notice), so an underivable bound is never a pass.
    """
    return [f"bound {name} could not be derived: {bound.get('note', 'no value')}"
            for name, bound in derived.items() if bound.get("value") is None]


def apply_bounds(options: Mapping[str, Any] | None, derived: Mapping[str, Any]) -> dict[str, Any]:
    """The checker options with each derived value in place (an underivable bound is left out)."""
    result = copy.deepcopy(dict(options or {}))
    for name, bound in derived.items():
        if bound.get("value") is None:
            continue
        if name == DEADLINE:
            result[DEADLINE] = bound["value"]
        else:
            _, lane, threshold = name.split(".")
            result.setdefault("slo", {}).setdefault(lane, {})[threshold] = bound["value"]
    return result


def bounds_markdown(derived: Mapping[str, Any] | None) -> list[str]:
    """The report section: each bound, its formula and the values of its terms."""
    if not derived:
        return []
    lines = ["## Derived bounds", "",
             "Bounds that follow from the fault schedule, derived from this run's measured kills, "
             "restarts and job service times (chaos/bounds.py).", ""]
    for name, bound in derived.items():
        value = bound.get("value")
        lines.append(f"- **{name}** = {'underivable: ' + bound.get('note', '') if value is None else f'{value} s'}"
                     f" = `{bound['formula']}`")
        terms = bound.get("terms", {})
        for lane, lane_terms in (terms.get("lanes") or {"": terms}).items():
            shown = {k: v for k, v in lane_terms.items() if k != "lane"}
            lines.append(f"  - {lane + ': ' if lane else ''}{shown}")
        if "per_lane" in terms:
            lines.append(f"  - per lane: {terms['per_lane']}; detection {terms['detection']} s "
                         f"(liveness_ttl {terms['liveness_ttl']} + 2 x relay_interval {terms['relay_interval']}); "
                         f"{len(terms['kills'])} worker kills or restarts, {len(terms.get('link_windows', []))} link toxics")
    return lines + [""]
