"""The settle wait after a run's load, derived per run instead of a constant.

After the load (and the heal), the final read waits for the outbox to settle: every row
``done`` or ``failed``. A fixed wall-clock wait is a verdict bound in disguise: a ramp that
left 584 narratives behind a provider limit of 8 case-calls a minute needs at least 44 s
at TIME_SCALE 0.01, and a 60 s constant called a healthy stack on a slow machine invalid.
So the wait is derived from the run, from the first outbox read after the load:

- **backlog** of a lane: its rows still open (``pending`` or ``enqueued``; kinds the scenario
  allows to stay pending are not waited for);
- **per_job** of a lane: what the lane took per job during the run, measured from its done
  rows (chaos/bounds.py ``service_time``: the median gap between completions while jobs
  waited, else the median queue-to-done time). A lane with no done row yet falls back to
  its case service time x TIME_SCALE (noted). The AI lane never drains faster than the
  provider limit: ``per_job >= 60 s x TIME_SCALE / ai_calls_per_minute``;
- **waiting**: the latest ``not_before`` of a lane's waiting rows (a job that must wait for
  the limiter, a backoff or a Retry-After hands its row back with a not-before time), from now;
- **expected** = relay_interval + merit's (waiting + backlog x per_job)
  + the slower of the AI and SMS lanes' (waiting + backlog x per_job): narratives and SMS
  start only once their merit card is done.

The wait ends at the first of:

- **settled**: no row left open;
- **stalled**: a lane with open rows showed no progress (no row of it changed status,
  enqueue count or not-before) for ``stall_after`` seconds past its latest not-before:
  detection (liveness_ttl + 2 x relay_interval, what a lost job costs before the reconciler
  re-enqueues it) + 2 x its per_job, plus for the AI lane the longest case backoff x TIME_SCALE.
  A lane that stopped ends the wait at once, so a lost job costs seconds, not the cap;
- **cap**: ``CAP_MULTIPLE`` x expected (at least one stall interval, so that a short wait can
  still tell a stall). Whenever rows became final since the previous poll, the plan is derived
  again from the outbox as it is then (backlog left, per_job measured so far, the wait's own
  completions included) and the cap moves to now + ``CAP_MULTIPLE`` x that expected if later:
  a lane without a done job at first had only its case service time to go on. Only real
  completions move it, so a job re-enqueued forever still meets the cap. A not-before a lane
  sets during the wait, plus its stall interval, also moves it (a deferral is the lane
  working: the provider asked it to wait).

The derivation and its terms go to scenario.json (``settle_wait``) and the report (ramp.md,
report.md), as the derived verdict bounds do. What the wait could not see complete the
final read's queue evidence judges (chaos/checkers/jobs.py: in progress is pending,
verdict unknown; in neither place is stuck, invalid).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from chaos.bounds import service_time
from chaos.ledgers import LANE_OF_KIND, OutboxRow

__all__ = ["CAP_MULTIPLE", "FORMULA", "UNREADABLE_FOR", "SettlePlan", "SettleResult", "SettleTerms", "plan_settle", "settle_markdown", "wait_to_settle"]

CAP_MULTIPLE = 3.0
"""The wait never exceeds this multiple of the derived expected drain (see the module doc)."""

_OPEN = ("pending", "enqueued")
UNREADABLE_FOR = 60.0
"""Seconds without a single outbox read (the admin listener not back after a heal) before the wait
gives up: no verdict follows from it, the final read's exports then fail and the run is unknown."""
_CASE_SERVICE = {"merit": "CASE_MERIT_COMPUTE_SECONDS", "ai": "CASE_AI_CALL_SECONDS", "sms": "CASE_SMS_CALL_SECONDS"}


@dataclass(frozen=True)
class SettleTerms:
    """The stack's settings the derivation uses (real seconds unless named case)."""

    time_scale: float
    relay_interval: float
    liveness_ttl: float
    ai_calls_per_minute: int
    case_service: Mapping[str, float]  # lane -> case seconds one job costs
    case_backoff_max: float

    @classmethod
    def from_settings(cls, settings: Any) -> "SettleTerms":
        """From a stack.config.Settings."""
        import stack.config as config

        return cls(settings.time_scale, settings.relay_interval, settings.liveness_ttl, settings.ai_calls_per_minute,
                   {lane: getattr(config, name) for lane, name in _CASE_SERVICE.items()}, config.CASE_BACKOFF_MAX_SECONDS)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "SettleTerms":
        """From a stack's environment settings (the ramp's manifest; {} = the defaults)."""
        from stack.config import load_settings

        return cls.from_settings(load_settings(dict(environ)))

    @property
    def detection(self) -> float:
        return self.liveness_ttl + 2 * self.relay_interval

    @property
    def provider_interval(self) -> float:
        """Real seconds between two AI calls at the provider limit."""
        return 60.0 * self.time_scale / self.ai_calls_per_minute


@dataclass(frozen=True)
class SettlePlan:
    expected: float
    cap: float
    lanes: dict[str, dict[str, Any]]  # lane -> backlog, per_job, waiting, drain, stall_after
    terms: dict[str, Any]

    def stall_after(self, lane: str) -> float:
        return float(self.lanes[lane]["stall_after"])

    def as_dict(self) -> dict[str, Any]:
        return {"expected": self.expected, "cap": self.cap, "cap_multiple": CAP_MULTIPLE, "lanes": self.lanes,
                "terms": self.terms, "formula": FORMULA}


FORMULA = ("expected = relay_interval + drain(merit) + max(drain(ai), drain(sms)); drain = waiting + backlog x per_job; "
           f"cap = max({CAP_MULTIPLE:g} x expected, max stall_after); stall_after = detection + 2 x per_job "
           "(+ case_backoff_max x time_scale for ai)")


def _rows(rows: Sequence[Mapping[str, Any]]) -> list[OutboxRow]:
    names = OutboxRow.__dataclass_fields__
    return [OutboxRow(**{k: v for k, v in row.items() if k in names}) for row in rows]


def plan_settle(rows: Sequence[Mapping[str, Any]], terms: SettleTerms, now: float,
                allow_pending: frozenset[str] = frozenset()) -> SettlePlan:
    """The plan from the first outbox read after the load (export rows, wall-clock ``now``)."""
    lanes = {lane: _lane_plan(lane, rows, terms, now, allow_pending) for lane in ("merit", "ai", "sms")}
    expected = terms.relay_interval + lanes["merit"]["drain"] + max(lanes["ai"]["drain"], lanes["sms"]["drain"])
    cap = max(CAP_MULTIPLE * expected, max(lane["stall_after"] for lane in lanes.values()))
    shown = {"time_scale": terms.time_scale, "relay_interval": terms.relay_interval, "liveness_ttl": terms.liveness_ttl,
             "detection": terms.detection, "ai_calls_per_minute": terms.ai_calls_per_minute,
             "provider_interval": round(terms.provider_interval, 4),
             "case_backoff_max": terms.case_backoff_max}
    return SettlePlan(round(expected, 3), round(cap, 3), lanes, shown)


def _lane_plan(lane: str, rows: Sequence[Mapping[str, Any]], terms: SettleTerms, now: float,
               allow_pending: frozenset[str]) -> dict[str, Any]:
    mine = [row for row in rows if LANE_OF_KIND.get(str(row.get("kind"))) == lane]
    open_rows = [row for row in mine if row.get("status") in _OPEN and row.get("kind") not in allow_pending]
    measured, source = service_time(_rows(mine))
    per_job = measured if measured is not None else terms.case_service[lane] * terms.time_scale
    if measured is None:
        source = f"no done job: case service {terms.case_service[lane]} s x time_scale"
    if lane == "ai" and per_job < terms.provider_interval:
        per_job, source = terms.provider_interval, f"the provider limit (measured {measured})"
    waiting = max([float(row["not_before"]) - now for row in open_rows if row.get("not_before") is not None] + [0.0])
    stall_after = terms.detection + 2 * per_job + (terms.case_backoff_max * terms.time_scale if lane == "ai" else 0.0)
    return {"backlog": len(open_rows), "per_job": round(per_job, 4), "per_job_from": source,
            "waiting": round(waiting, 3), "drain": round(waiting + len(open_rows) * per_job, 3),
            "stall_after": round(stall_after, 3)}


@dataclass
class SettleResult:
    settled: bool
    waited: float
    still_open: int
    ended_by: str  # settled | stalled | cap | no outbox
    plan: SettlePlan | None
    stalled_lanes: list[str] = field(default_factory=list)
    explicit_timeout: float | None = None
    rederived: int = 0  # polls after which rows had become final and the cap was derived again

    def as_dict(self) -> dict[str, Any]:
        return {"settled": self.settled, "waited": round(self.waited, 3), "still_open": self.still_open,
                "ended_by": self.ended_by, "stalled_lanes": self.stalled_lanes, "rederived": self.rederived,
                "explicit_timeout": self.explicit_timeout, "plan": self.plan.as_dict() if self.plan else None}


class _Watch:
    """Per lane: when its rows last changed, and the latest not-before they carry."""

    def __init__(self, allow_pending: frozenset[str]) -> None:
        self.allow_pending = allow_pending
        self.marks: dict[str, tuple[Any, ...]] = {}
        self.changed_at: dict[str, float] = {}
        self.quiet_until: dict[str, float] = {}

    def observe(self, rows: Sequence[Mapping[str, Any]], now: float) -> dict[str, int]:
        """Record the lanes' marks; returns open rows per lane."""
        open_by_lane: dict[str, int] = {}
        marks: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            lane = LANE_OF_KIND.get(str(row.get("kind")), str(row.get("kind")))
            marks.setdefault(lane, []).append((row.get("operation_id"), row.get("status"), row.get("attempts"),
                                               row.get("not_before")))
            if row.get("status") in _OPEN and row.get("kind") not in self.allow_pending:
                open_by_lane[lane] = open_by_lane.get(lane, 0) + 1
                if row.get("not_before") is not None:
                    self.quiet_until[lane] = max(self.quiet_until.get(lane, 0.0), float(row["not_before"]))
        for lane, mark in marks.items():
            signature = tuple(sorted(mark, key=str))
            if self.marks.get(lane) != signature:
                self.marks[lane], self.changed_at[lane] = signature, now
        return open_by_lane

    def stalled(self, open_by_lane: Mapping[str, int], plan: SettlePlan, now: float) -> list[str]:
        return sorted(lane for lane in open_by_lane if lane in plan.lanes and
                      now - max(self.changed_at.get(lane, now), self.quiet_until.get(lane, 0.0)) >= plan.stall_after(lane))

    def latest_quiet(self, plan: SettlePlan) -> float:
        """The latest not-before seen plus that lane's stall interval (0 when none)."""
        return max([until + plan.stall_after(lane) for lane, until in self.quiet_until.items() if lane in plan.lanes]
                   + [0.0])


def wait_to_settle(read_outbox: Callable[[], Sequence[Mapping[str, Any]] | None], terms: SettleTerms,
                   allow_pending: frozenset[str] = frozenset(), *, explicit_timeout: float | None = None,
                   clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                   poll: float = 0.25) -> SettleResult:
    """Poll the outbox (``read_outbox`` returns its rows, or None when the read failed) until it settles,
    a lane stalls, or the derived cap passes. ``explicit_timeout`` replaces the rule by a plain
    wait of that many seconds (a generous timeout, to compare a derived wait against)."""
    started = clock()
    watch, plan, open_rows = _Watch(allow_pending), None, -1
    cap_at, final_rows, rederived = started + UNREADABLE_FOR, -1, 0
    while True:
        now = clock()
        rows = read_outbox()
        if rows is not None:
            open_by_lane = watch.observe(rows, now)
            open_rows = sum(open_by_lane.values())
            finals = len(rows) - open_rows
            if plan is None:
                plan = plan_settle(rows, terms, now, allow_pending)
                cap_at = started + plan.cap
            elif finals > final_rows:  # real completions: derive again from what the lanes did since
                cap_at = max(cap_at, now + CAP_MULTIPLE * plan_settle(rows, terms, now, allow_pending).expected)
                rederived += 1
            final_rows = finals
            if open_rows == 0:
                return SettleResult(True, clock() - started, 0, "settled", plan, explicit_timeout=explicit_timeout,
                                    rederived=rederived)
            if explicit_timeout is None:
                stalled = watch.stalled(open_by_lane, plan, now)
                if stalled:
                    return SettleResult(False, clock() - started, open_rows, "stalled", plan, stalled,
                                        rederived=rederived)
        end = _deadline(cap_at, plan, watch, started, explicit_timeout)
        if now >= end:
            ended_by = "timeout" if explicit_timeout is not None else "cap" if plan is not None else "no outbox read"
            return SettleResult(False, clock() - started, open_rows, ended_by, plan, explicit_timeout=explicit_timeout,
                                rederived=rederived)
        sleep(poll)


def _deadline(cap_at: float, plan: SettlePlan | None, watch: _Watch, started: float,
              explicit_timeout: float | None) -> float:
    if explicit_timeout is not None:
        return started + explicit_timeout
    if plan is None:
        return cap_at  # no outbox read yet: nothing to derive from (UNREADABLE_FOR)
    return max(cap_at, watch.latest_quiet(plan))


def settle_markdown(settle: Mapping[str, Any] | None) -> list[str]:
    """The report section: how long the final read waited, why it stopped, and the derivation."""
    if not settle:
        return []
    lines = ["## Settle wait (derived)", "",
             f"The final read waited {settle['waited']} s and stopped: **{settle['ended_by']}**"
             + (f" (lanes {', '.join(settle['stalled_lanes'])} made no progress)" if settle.get("stalled_lanes") else "")
             + f"; {settle['still_open']} outbox rows open (chaos/settle.py).", ""]
    if settle.get("explicit_timeout") is not None:
        lines += [f"An explicit timeout of {settle['explicit_timeout']} s replaced the derived rule.", ""]
    plan = settle.get("plan")
    if plan:
        lines += [f"- at the end of the load: expected {plan['expected']} s, cap {plan['cap']} s "
                  f"(x{plan['cap_multiple']:g}) = `{plan['formula']}`; derived again after "
                  f"{settle.get('rederived', 0)} polls that saw rows become final",
                  f"  - terms: {plan['terms']}"]
        lines += [f"  - {lane}: {terms}" for lane, terms in plan["lanes"].items()]
    return lines + [""]
