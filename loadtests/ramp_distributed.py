"""The distributed ramp's two sides over Locust's messages (protocol: ramp_wire.py).

Imported by the locustfile only (gevent, Locust). The master accepts a worker only after it
presented the run's token, then sends it its setup (plan options, its part of the roster, the
target); it writes each worker's history stream and, when the ramp is over, asks every worker
to drain and waits until each reported the end of its history or is gone. A worker waits for
its setup before any user sends a request, streams its history in bounded batches and exits
when the master goes silent.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

import gevent
from gevent.event import Event
from locust.rpc import Message

from ramp_student import HistoryWriter
from ramp_wire import BATCH_LINES, TOKEN_ENV, LineBuffer, StreamReceiver, partition_roster, token_matches

__all__ = ["DRAIN_LIMIT", "PLAN_OPTIONS", "MasterSide", "WorkerSide", "is_loopback"]

log = logging.getLogger("exam_ramp")
PLAN_OPTIONS = ("ramp_steps", "ramp_step_seconds", "ramp_per_user_rate", "ramp_questions", "ramp_exam",
                "ramp_polls", "ramp_max_tries", "ramp_seed", "ramp_arrivals", "ramp_distribution",
                "ramp_max_send_lag", "ramp_max_queue", "ramp_max_in_flight")
"""What a worker needs of the plan; the master's values win over the worker's command line."""
_FLUSH_SECONDS = 0.5
SCHEDULE_GRACE = 10.0
"""How long past the master's end a worker may still send its own schedule's arrivals (its
clock started when its first slot did, after the master's: the spawn took that long)."""
IN_FLIGHT_GRACE = 20.0
"""How long a draining worker waits for requests in flight: > the user's network + connection
timeouts (10 + 5 s). The master waits for both and the last batches: DRAIN_LIMIT."""
DRAIN_LIMIT = SCHEDULE_GRACE + IN_FLIGHT_GRACE + 10.0


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


class MasterSide:
    """Made first thing at the master's init, so no worker message is ever unknown to it; hellos
    that come before ``configure`` (the stack still starting) get no answer, and the worker
    says hello again."""

    def __init__(self, environment: Any, token: str, expected: int) -> None:
        self.environment, self.token, self.expected = environment, token, expected
        self.receiver: StreamReceiver | None = None
        self.roster_path = ""
        self.ready: set[str] = set()
        self.rejected = 0
        self.draining = False
        runner = environment.runner
        runner.register_message("proctor_hello", self._on_hello)
        runner.register_message("proctor_ready", self._on_ready)
        runner.register_message("proctor_history", lambda msg, **_: self.receiver and
                                self.receiver.batch(msg.node_id, msg.data))
        runner.register_message("proctor_history_end", lambda msg, **_: self.receiver and
                                self.receiver.finish(msg.node_id, msg.data))

    def configure(self, run_dir: Path, roster_path: str) -> None:
        self.roster_path = roster_path
        self.receiver = StreamReceiver(run_dir, self.expected)

    def _on_hello(self, msg: Any, **_kwargs: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        if self.receiver is None:
            return  # not configured yet: the worker says hello again
        if msg.node_id in self.receiver.streams:  # a repeated hello of an accepted worker: its setup again
            worker = self.receiver.streams[msg.node_id].worker
            self.environment.runner.send_message("proctor_setup", self._setup(worker), client_id=msg.node_id)
            return
        if not token_matches(data.get("token"), self.token) or len(self.receiver.streams) >= self.expected:
            self.rejected += 1
            log.warning("exam_ramp: worker %s refused (wrong token, or more workers than --expect-workers)",
                        msg.node_id)
            self._forget(msg.node_id)
            self.environment.runner.server.send_to_client(Message("quit", None, msg.node_id))
            return
        worker = len(self.receiver.streams)
        self.receiver.open(msg.node_id, worker, data.get("pid"), data.get("host"))
        self.environment.runner.send_message("proctor_setup", self._setup(worker), client_id=msg.node_id)

    def _forget(self, client_id: str) -> None:
        """Out of Locust's worker list at once, as Locust does on a worker's own quit: a refused
        worker must not count toward --expect-workers, nor be handed users by the dispatcher
        (whose spawn would then wait for a worker that is leaving)."""
        runner = self.environment.runner
        if client_id not in runner.clients:
            return
        client = runner.clients[client_id]
        del runner.clients[client_id]
        dispatcher = getattr(runner, "_users_dispatcher", None)  # Locust's own, private
        if dispatcher is not None:
            dispatcher.remove_worker(client)

    def _setup(self, worker: int) -> dict[str, Any]:
        options = self.environment.parsed_options
        exams = json.loads(Path(self.roster_path).read_text()).get("exams", {})
        students = partition_roster(exams.get(options.ramp_exam, {}), worker, self.expected)
        return {"worker": worker, "workers": self.expected, "host": self.environment.host,
                "roster": {options.ramp_exam: students},
                "options": {name: getattr(options, name) for name in PLAN_OPTIONS}}

    def _on_ready(self, msg: Any, **_kwargs: Any) -> None:
        if msg.node_id in self.receiver.streams:
            self.ready.add(msg.node_id)

    def all_ready(self) -> bool:
        return len(self.ready) >= self.expected

    def drain(self) -> None:
        """Once: ask every accepted worker to finish its requests and send the end of its history."""
        if self.draining:
            return
        self.draining = True
        for client_id in (self.receiver.streams if self.receiver else {}):
            self.environment.runner.send_message("proctor_drain", {}, client_id=client_id)

    def drained(self) -> bool:
        """Every accepted worker reported its end, or is gone (killed: Locust lost its heartbeat)."""
        if self.receiver is None:
            return True
        clients = self.environment.runner.clients
        return all(self.receiver.ended(cid) or cid not in clients or clients[cid].state == "missing"
                   for cid in self.receiver.streams)

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.write_manifest()


class WorkerSide:
    """A worker's state: its setup from the master, its history buffer, its in-flight count."""

    def __init__(self, environment: Any, token: str, master_timeout: float,
                 generator_summary: Callable[[], dict[str, Any] | None], schedule_over: Callable[[], bool],
                 in_flight: Callable[[], int]) -> None:
        self.environment, self.token, self.master_timeout = environment, token, master_timeout
        self.generator_summary, self.schedule_over, self.in_flight = generator_summary, schedule_over, in_flight
        self.setup: dict[str, Any] | None = None
        self.ready = Event()
        self.buffer = LineBuffer()
        self.history = HistoryWriter(sink=self.buffer)
        self.draining = False
        self.ended = False
        self._last_heartbeat = time.monotonic()
        runner = environment.runner
        runner.register_message("proctor_setup", self._on_setup)
        runner.register_message("proctor_drain", self._on_drain, concurrent=True)
        environment.events.heartbeat_received.add_listener(self._on_heartbeat)
        gevent.spawn(self._hello)
        gevent.spawn(self._stream)
        gevent.spawn(self._watch_master)

    def _hello(self) -> None:
        """Until the master answers: it may still be starting its stack, or not yet listening."""
        while self.setup is None:
            self.environment.runner.send_message("proctor_hello", {"token": self.token, "pid": os.getpid(),
                                                                   "host": socket.gethostname()})
            gevent.sleep(2.0)

    def _on_setup(self, msg: Any, **_kwargs: Any) -> None:
        if self.setup is not None or not isinstance(msg.data, dict):
            return
        self.setup = msg.data
        vars(self.environment.parsed_options).update(self.setup["options"])
        self.environment.host = self.setup["host"]
        self.ready.set()
        self.environment.runner.send_message("proctor_ready", {})

    def _on_heartbeat(self, **_kwargs: Any) -> None:
        self._last_heartbeat = time.monotonic()

    def _watch_master(self) -> None:
        """Locust's own worker waits 60 s for a silent master; a ramp worker leaves sooner."""
        while True:
            gevent.sleep(1.0)
            silent = time.monotonic() - self._last_heartbeat
            if silent > self.master_timeout:
                print(f"exam_ramp: no heartbeat from the master for {silent:.0f}s (> --ramp-master-timeout "
                      f"{self.master_timeout:g}): this worker quits", file=sys.stderr, flush=True)
                self.environment.process_exit_code = 2
                self.environment.runner.quit()
                return

    def _stream(self) -> None:
        while not self.ended:
            gevent.sleep(_FLUSH_SECONDS)
            self._send_batches(full_only=False)

    def _send_batches(self, full_only: bool) -> None:
        while len(self.buffer) >= (BATCH_LINES if full_only else 1):
            self.environment.runner.send_message("proctor_history", self.buffer.take(BATCH_LINES))

    def _on_drain(self, **_kwargs: Any) -> None:
        """The master's ramp is over. This worker's own schedule began when its first slot
        started (after the master's clock), so it may have arrivals left: send them (bounded),
        then no new request; wait (bounded) for those in flight, then the last batches and the end."""
        _wait_until(self.schedule_over, SCHEDULE_GRACE)
        self.draining = True
        _wait_until(lambda: not self.in_flight(), IN_FLIGHT_GRACE)
        self.send_end()

    def send_end(self) -> None:
        if self.ended:
            return
        self._send_batches(full_only=False)
        self.ended = True
        self.environment.runner.send_message("proctor_history_end", {
            "batches": self.buffer.batches, "lines": self.buffer.lines,
            "counts": dict(sorted(self.history.counts.items())),
            "in_flight_left": self.in_flight(), "generator": self.generator_summary()})


def _wait_until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        gevent.sleep(0.1)


def require_token(environment: Any, token_given: bool) -> None:
    """A worker started by hand must be given the master's token; a forked one inherits it."""
    options = environment.parsed_options
    if not token_given and not getattr(options, "processes", None):
        sys.exit(f"exam_ramp: a worker needs the master's per-run token in ${TOKEN_ENV} "
                 "(the master prints where it wrote it)")
