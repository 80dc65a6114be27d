"""The AI lane's failure-table scenarios on the real embedded stack (issue #11).

Real parts: the web nodes take the exams, the relay enqueues the narrative rows, two
RQ AI workers run ``stack.lanes.ai.job.write_narrative`` against the fake provider over
HTTP. Each scenario builds a backlog the same way: the lane is paused through the
admin API before the load (``prepare``), the students finish while their narratives
wait, and after the load a driver (a scenario ``background`` task) sets the provider's
fault for the phase and resumes the lane through the admin API, exactly what
``proctor lane resume ai`` does. So every narrative is due at one known moment, and
the drain from there is measured on the ledger's own ``done_at`` times.

The driver's timeouts are harness patience only: the verdict rests on the ledgers
(provider_limit, duplicate_charges, billing, paused_calls, effects, jobs). The drain
ratio (drain time / (N / 8) case-minutes) is stored under ``background.ai_lane`` in
scenario.json as a figure; ``loadtests/bench_ai_drain.py`` prints it, no test asserts it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from chaos.deployment import Deployment
from chaos.history import History
from chaos.runner import Scenario
from chaos.load.exam import WorkloadSpec
from stack.config import CASE_PROVIDER_CALLS_PER_MINUTE, CASE_RETRY_WINDOW_SECONDS
from stack.headers import ADMIN_TOKEN_HEADER

__all__ = ["AI_LANE_SCENARIOS", "BACKLOG", "DRAIN_BACKLOG", "DRAIN_SCALE", "LANE_SCALE", "LanePlan", "demanded_pause_seconds",
           "lane_driver", "pause_lane_for_backlog"]

POLL_SECONDS = 0.25


@dataclass(frozen=True)
class LanePlan:
    """What the driver does after the load. Provider knobs are in case time where they are durations."""

    provider_faults: dict[str, Any] = field(default_factory=dict)  # set just before the resume
    retry_after_case_seconds: float | None = None  # a 429's Retry-After, scaled to the run
    halt_then_repair: dict[str, Any] | None = None  # knobs that put a halted provider right (credit, key)
    hold_paused_case_seconds: float = 120.0  # how long to watch a halted lane make no calls
    kill_mid_call: bool = False  # SIGKILL every worker of the lane while a provider call is in flight
    halt_faults: dict[str, Any] | None = None  # knobs that halt the lane, set after the kill
    outlive_deadline: bool = False  # resume only after every narrative's retry deadline has passed
    replay_review: bool = False  # then replay each item of the review queue through the admin API
    lane: str = "ai"  # or "sms": the gateway meters the same way (stack/lanes/sms_refusals.py)

    @property
    def kind(self) -> str:
        return {"ai": "narrative", "sms": "sms"}[self.lane]

    @property
    def provider(self) -> str:
        return {"ai": "ai_provider", "sms": "sms_gateway"}[self.lane]
    patience_factor: float = 8.0  # harness patience: this many theoretical drains, plus setup


def _admin(stack: Deployment) -> tuple[str, dict[str, str]]:
    return stack.urls["admin"], {ADMIN_TOKEN_HEADER: stack.settings.admin_token}


def pause_lane_for_backlog(lane: str):  # a Scenario.prepare
    """``prepare``: pause the lane (operator action, audited) so its rows pile up during the load."""

    def prepare(stack: Deployment) -> None:
        url, headers = _admin(stack)
        response = httpx.post(f"{url}/admin/lanes/{lane}/pause", headers=headers,
                              json={"reason": "scenario: build a backlog"}, timeout=10)
        response.raise_for_status()

    return prepare


async def _rows(client: httpx.AsyncClient, url: str, kind: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The lane's outbox rows, and the merit rows they wait for."""
    rows = (await client.get(f"{url}/admin/export/outbox")).raise_for_status().json()["rows"]
    return [r for r in rows if r["kind"] == kind], [r for r in rows if r["kind"] == "merit"]


async def _wait(predicate: Any, patience: float) -> bool:
    """Poll an async predicate until it holds or the harness runs out of patience."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(POLL_SECONDS)
    return False


async def _set_provider(client: httpx.AsyncClient, stack: Deployment, plan: LanePlan, knobs: dict[str, Any]) -> None:
    (await client.put(f"{stack.urls[plan.provider]}/admin/faults", json=knobs)).raise_for_status()


class _Driver:
    def __init__(self, stack: Deployment, plan: LanePlan, client: httpx.AsyncClient) -> None:
        self.stack, self.plan, self.client = stack, plan, client
        self.url, _ = _admin(stack)
        self.scale = stack.settings.time_scale
        self.record: dict[str, Any] = {"time_scale": self.scale,
                                       "case_minute_seconds": 60 * self.scale,
                                       "retry_window_seconds": CASE_RETRY_WINDOW_SECONDS * self.scale,
                                       "calls_per_case_minute": CASE_PROVIDER_CALLS_PER_MINUTE}

    async def backlog_ready(self) -> bool:
        """Every finished attempt's merit card is done, so each narrative is due at the resume."""
        narratives, merits = await _rows(self.client, self.url, self.plan.kind)
        self.record["n"] = len(narratives)
        return bool(narratives) and all(m["status"] in ("done", "failed") for m in merits)

    async def drained(self) -> bool:
        narratives, _ = await _rows(self.client, self.url, self.plan.kind)
        return all(r["status"] in ("done", "failed") for r in narratives)

    async def resume(self, label: str) -> float:
        response = await self.client.post(f"{self.url}/admin/lanes/{self.plan.lane}/resume")
        response.raise_for_status()
        at = time.time()
        self.record.setdefault("resumes", []).append({"label": label, "at": at, "to_review": response.json().get("to_review")})
        return at

    async def halted(self) -> bool:
        alerts = (await self.client.get(f"{self.url}/admin/alerts")).raise_for_status().json()["alerts"]
        lane = (await self.client.get(f"{self.url}/admin/lanes/{self.plan.lane}")).raise_for_status().json()
        return any(alert["lane"] == self.plan.lane for alert in alerts) and lane["paused"]

    def patience(self) -> float:
        theoretical = max(self.record.get("n", 0), 1) / CASE_PROVIDER_CALLS_PER_MINUTE * 60 * self.scale
        return self.plan.patience_factor * theoretical + 30.0

    async def run(self) -> dict[str, Any]:
        self.record["backlog_ready"] = await _wait(self.backlog_ready, 60.0)
        knobs = dict(self.plan.provider_faults)
        if self.plan.retry_after_case_seconds is not None:
            knobs["retry_after_seconds"] = self.plan.retry_after_case_seconds * self.scale
        if knobs:
            await _set_provider(self.client, self.stack, self.plan, knobs)
        self.record["provider_faults"] = knobs
        if self.plan.outlive_deadline:
            await self._outlive_deadline()
        started = await self.resume("backlog")
        if self.plan.kill_mid_call:
            await self._kill_mid_call(self._lane_workers())
        if self.plan.halt_faults is not None:
            await _set_provider(self.client, self.stack, self.plan, self.plan.halt_faults)
        if self.plan.halt_then_repair is not None:
            await self._halt_and_repair()
        if self.plan.replay_review:
            await self._replay_review()
        self.record["drained"] = await _wait(self.drained, self.patience())
        await self._drain_figures(started)
        return self.record

    async def _outlive_deadline(self) -> None:
        """Wait (paused) until the last narrative's deadline, accepted + retry window, is behind us."""
        narratives, _ = await _rows(self.client, self.url, self.plan.kind)
        deadline = max(r["created_at"] for r in narratives) + self.record["retry_window_seconds"]
        await asyncio.sleep(max(0.0, deadline - time.time()) + POLL_SECONDS)
        self.record["waited_past_deadline"] = True

    async def _kill_mid_call(self, components: list[str]) -> None:
        """SIGKILL every worker of the lane while a reservation is pending, so whichever worker
        made the call dies in it (with two workers, killing one could hit the idle one). A call
        that ended between the look and the kill leaves nothing orphaned: try at the next call."""
        deadline = time.monotonic() + self.patience()
        attempts: list[dict[str, Any]] = self.record.setdefault("kill_attempts", [])
        while time.monotonic() < deadline:
            self.record["in_call"] = await _wait(self._pending_calls, deadline - time.monotonic())
            if not self.record["in_call"]:
                return
            before = set(await self._pending_calls())
            pids = sorted(pid for component in components for pid in self.stack.kill(component))
            orphaned = sorted(before & set(await self._pending_calls()))
            attempts.append({"at": time.time(), "pids": pids, "orphaned_calls": orphaned})
            if orphaned:
                self.record["killed"] = {"components": components, **attempts[-1]}
                return

    def _lane_workers(self) -> list[str]:
        return [c.name for c in self.stack.components() if c.role == "worker" and c.lane == self.plan.lane]

    async def _pending_calls(self) -> list[str]:
        rows = (await self.client.get(f"{self.url}/admin/export/ai_reservations")).raise_for_status().json()["rows"]
        return [row["call_id"] for row in rows if row["state"] == "pending"]

    async def _replay_review(self) -> None:
        """Every item in review gets one audited replay (``proctor review replay ID``'s route)."""
        items = (await self.client.get(f"{self.url}/admin/review")).raise_for_status().json()["items"]
        self.record["review"] = [{"operation_id": i["operation_id"], "has_record": i["record"] is not None}
                                 for i in items]
        for item in items:
            (await self.client.post(f"{self.url}/admin/review/{item['operation_id']}/replay")).raise_for_status()

    async def _halt_and_repair(self) -> None:
        self.record["halted"] = await _wait(self.halted, self.patience())
        await asyncio.sleep(self.plan.hold_paused_case_seconds * self.scale)  # calls here would be violations
        await _set_provider(self.client, self.stack, self.plan, self.plan.halt_then_repair or {})
        await self.resume("after repair")

    async def _drain_figures(self, started: float) -> None:
        """Drain from the resume to the last ``done_at``, as a ratio to N / 8 case-minutes, and
        to N / 8 case-minutes plus the pauses the provider demanded (the union of its 429s'
        [at, at + Retry-After], from its refusal log); and from the end of the last Retry-After."""
        narratives, _ = await _rows(self.client, self.url, self.plan.kind)
        done = [r["done_at"] for r in narratives if r["status"] == "done" and r["done_at"]]
        theoretical = len(narratives) / CASE_PROVIDER_CALLS_PER_MINUTE * 60 * self.scale
        ledger = (await self.client.get(f"{self.stack.urls[self.plan.provider]}/admin/ledger")).raise_for_status().json()
        pauses = [(r["at"], r["at"] + r["retry_after_seconds"]) for r in ledger.get("refusals", [])
                  if r.get("retry_after_seconds")]
        storm_end = max((end for _, end in pauses), default=started)
        paused = demanded_pause_seconds(pauses, started)
        self.record.update(n=len(narratives), done=len(done), theoretical_seconds=round(theoretical, 3),
                           storm_seconds=round(storm_end - started, 3), provider_pause_seconds=round(paused, 3))
        if done and theoretical:
            drain = max(done) - started
            self.record.update(drain_seconds=round(drain, 3), drain_ratio=round(drain / theoretical, 3),
                               drain_ratio_with_pauses=round(drain / (theoretical + paused), 3),
                               drain_ratio_after_storm=round((max(done) - storm_end) / theoretical, 3))


def demanded_pause_seconds(pauses: list[tuple[float, float]], since: float) -> float:
    """The time inside at least one [start, end) pause the provider asked for, from ``since``:
    two workers refused together ask for overlapping pauses, which count once."""
    total, reached = 0.0, since
    for start, end in sorted(pauses):
        start = max(start, reached)
        if end > start:
            total, reached = total + end - start, end
    return total


def lane_driver(plan: LanePlan):  # a chaos.runner.Background
    """The scenario background task: waits for the load to end, then drives the lane."""

    async def drive(stack: Deployment, history: History, stop: asyncio.Event) -> dict[str, Any]:
        await stop.wait()  # the load is over: every student has finished (or given up)
        _, headers = _admin(stack)  # the admin API and the provider's admin API take the same token
        async with httpx.AsyncClient(timeout=10.0, headers=headers) as client:
            return await _Driver(stack, plan, client).run()

    return drive


# -- the catalogue entries (chaos/scenarios/__init__.py adds them to SCENARIOS) --------------------------

LANE_SCALE = 0.05
"""One case-minute = 3 s. Measured on the shared 2-core machine, two RQ AI workers run about
4 narrative jobs a second (a forked horse, SQLite, one provider call): about 13 per
case-minute at this scale, so the shared limit of 8 is what holds the backlog back, and
two per-worker limiters (16) have room to go over it. At 0.01 the workers, not the
limiter, were the bottleneck (drain ratio 4.5 for 100 jobs) and no limiter was tested."""

BACKLOG = WorkloadSpec(arrival_rate=8.0, duration=3.0, questions=1, poll_deadline=20.0)
"""24 students finish one question each: 24 narratives wait behind the paused lane (three
case-minutes of calls at the limit: enough for a per-worker limiter to go over it)."""

DRAIN_BACKLOG = WorkloadSpec(arrival_rate=25.0, duration=4.0, questions=1, poll_deadline=30.0)
"""100 narratives: the drain measurement (loadtests/bench_ai_drain.py), not a test."""

DRAIN_SCALE = 0.1
"""The drain measurement's scale (a case-minute is 6 s). Once a limiter slot counts from the
provider's arrival, LANE_SCALE makes the workers, not the limiter, the bottleneck: each call
holds a worker for 10 case-seconds (0.5 s) plus a job's own cost (fork, ledger, HTTP: 0.3-0.7 s
on the loaded 2-core machine, 6-14 case-seconds), so two workers deliver fewer than 8 calls a
case-minute and the narratives ran at once, never waiting for a slot. At 0.1 that cost is
3-7 case-seconds, each narrative waited for the limiter several times, and the drain measures
the limiter, as issue #11 asks (docs/ai-lane.md has both figures). Not in the test suite."""

RETRY_AFTER_CASE_SECONDS = 120.0
"""Longer than the lane's first backoff (1 case-minute), so a lane that ignores Retry-After
comes back early and the retry_after checker can see it."""

_STORM = LanePlan(provider_faults={"fail_next": 4, "fail_next_status": 429},
                  retry_after_case_seconds=RETRY_AFTER_CASE_SECONDS)
"""The first 4 calls after the resume are refused with 429 and a Retry-After of 2 case-minutes
(two rounds: each pause lets the two workers' next calls through to be refused again)."""

PER_WORKER_LIMITER_WORKERS = 4
"""AI workers of the per-worker-limiter control. Each can be over the shared limit only by its
calls' speed: a call takes the provider's 10 case-seconds (0.5 s at its time scale 0.05) plus the
worker's own time, so a worker makes at most 6 calls in a sliding case-minute (3 s), and two made
at most 12 against the limit of 8: caught only while a call took under 0.75 s. On a machine with
both cores saturated calls took 0.7-1.1 s, two workers made 24 calls with none over the limit, and
the control read valid (a `make test` rehearsal, docs/harness.md). Four workers make 12 in a
case-minute even at 1 s a call."""

_STORM_FAR_RETRY_AFTER = LanePlan(provider_faults={"fail_next": 4, "fail_next_status": 429},
                                  retry_after_case_seconds=10 * 60.0)
"""The storm for the ignore-Retry-After control: a Retry-After of 10 case-minutes. A lane that
ignores it is back after its 1 case-minute backoff plus its wait for a limiter slot (24
narratives at 8 per case-minute: at most 3 case-minutes) and the scheduling of a loaded machine.
With the valid storm's 2 case-minutes, that wait alone could outlast the Retry-After, and the
control was missed in 2 of 3 seeds under a CPU hog (the flake sweep); 10 leaves the margin."""

_CREDIT_AND_LOST = LanePlan(provider_faults={"credit_balance": 18.0, "lose_response_next": 4}, halt_then_repair={},
                            hold_paused_case_seconds=40.0)
"""4 answers lost after the provider charged; credit for 18 calls, then 402 until repaired."""

_KEY_AND_KILL = LanePlan(provider_faults={"latency_seconds": 0.5}, kill_mid_call=True,
                         halt_faults={"key_revoked": True, "latency_seconds": 0.5}, halt_then_repair={},
                         hold_paused_case_seconds=40.0)
"""Calls take 0.5 s at the provider, so a kill of both AI workers lands mid-call; then every call
gets 401 until repaired."""

_SMS_STORM_AND_CREDIT = LanePlan(lane="sms", provider_faults={"fail_next": 4, "fail_next_status": 429,
                                                               "credit_balance": 18.0},
                                 retry_after_case_seconds=RETRY_AFTER_CASE_SECONDS, halt_then_repair={},
                                 hold_paused_case_seconds=40.0)
"""The AI lane's classes on the SMS lane (stack/lanes/sms_refusals.py)."""

DEADLINE_SCALE = 0.0005
"""The 12-case-hour retry window is 21.6 s, so a paused backlog outlives it within the test."""

_OPTIONS = {"expect_ops": ["answer", "finish"]}


def _lane_scenario(name: str, description: str, plan: LanePlan, settings: dict[str, Any] | None = None,
                   expect_valid: bool = True, workload: WorkloadSpec = BACKLOG, scale: float = LANE_SCALE,
                   options: dict[str, Any] | None = None, sms_plan: LanePlan | None = None,
                   ai_workers: int = 2) -> Scenario:
    """One lane's plan (background ``ai_lane``), or two lanes driven at once (``sms_lane`` too)."""
    plans = {"ai_lane": plan, **({"sms_lane": sms_plan} if sms_plan else {})}
    return Scenario(name=name, description=description, workload=workload, ai_workers=ai_workers,
                    settings={"time_scale": scale, **(settings or {})},
                    prepare=_pause_all(*(p.lane for p in plans.values())),
                    background={key: lane_driver(p) for key, p in plans.items()}, options=options or _OPTIONS,
                    expect_valid=expect_valid)


def _pause_all(*lanes: str):  # a Scenario.prepare
    def prepare(stack: Deployment) -> None:
        for lane in lanes:
            pause_lane_for_backlog(lane)(stack)

    return prepare


AI_LANE_SCENARIOS = (
    _lane_scenario("ai_storm", "a narrative backlog drains through a 429 storm with Retry-After on 2 AI workers: "
                   "never more than 8 calls in any sliding case-minute, no retry before its Retry-After", _STORM),
    _lane_scenario("ai_storm_per_worker_limiter", "negative control: each AI worker keeps its own limiter, so "
                   f"{PER_WORKER_LIMITER_WORKERS} workers send up to {8 * PER_WORKER_LIMITER_WORKERS} calls per "
                   "case-minute; provider_limit must fail", _STORM,
                   settings={"ai_shared_limiter": False}, expect_valid=False, ai_workers=PER_WORKER_LIMITER_WORKERS),
    _lane_scenario("ai_storm_ignore_retry_after", "negative control: the lane ignores Retry-After and retries on "
                   "its 1 case-minute backoff; retry_after must see the early retries", _STORM_FAR_RETRY_AFTER,
                   settings={"ai_retry_after": False}, expect_valid=False),
    _lane_scenario("ai_credit_and_lost_responses", "4 responses lost after the provider charged (asked by operation "
                   "id before any replay: no duplicate charge), then credit runs out mid-backlog: 402 pauses the lane "
                   "and alerts, no call while paused, credit restored, the admin API resumes, everything completes; "
                   "meanwhile the SMS gateway answers 429 with Retry-After, then 402: the SMS lane gets the same "
                   "classes (one run for both lanes keeps the suite short)", _CREDIT_AND_LOST,
                   sms_plan=_SMS_STORM_AND_CREDIT),
    _lane_scenario("ai_blind_replay", "negative control: the lane replays a lost response without asking the "
                   "provider (nor sending the Idempotency-Key): duplicate charges",
                   LanePlan(provider_faults={"lose_response_next": 4}),
                   settings={"ai_ask_before_replay": False}, expect_valid=False),
    _lane_scenario("ai_key_revoked_worker_killed", "the AI workers SIGKILLed while a call is at the provider "
                   "(slow calls), then the key revoked: 401 pauses the lane and alerts, the killed call is settled by "
                   "asking the provider, key restored, admin resume, everything completes once", _KEY_AND_KILL),
    _lane_scenario("ai_deadline_expiry", "the lane stays paused past every narrative's 12-case-hour deadline: the "
                   "resume sends each to review with its record, one audited replay each completes it exactly once",
                   LanePlan(outlive_deadline=True, replay_review=True), scale=DEADLINE_SCALE,
                   options={**_OPTIONS, "allow_failed_for_review": ["narrative"]}),
    _lane_scenario("ai_storm_drain", "the drain measurement: 100 narratives through a 429 storm "
                   "(loadtests/bench_ai_drain.py prints the ratio)", _STORM, workload=DRAIN_BACKLOG, scale=DRAIN_SCALE),
)
