"""``python -m stack.lanes.worker <lane> [--name NAME] [--burst]``: one RQ worker, one queue.

An RQ worker on exactly one queue, so dequeue is an atomic BLMOVE reservation. How it runs a
job is the lane's worker model (``Settings.worker_models``, ``$PROCTOR_WORKER_MODEL``, chosen once
in ``build_worker``): ``fork``, RQ's ``Worker``, runs each job in a new horse (its own process
group); ``simple``, RQ's ``SimpleWorker``, runs it in this process: no fork, no new Valkey
connection, warm caches (docs/embedded.md, "Worker models"). Either way the worker publishes its
state (``busy``/``idle``) under its component name (``WORKER_STATE_PREFIX``), which is how the
harness sees a job in flight without a horse. Its name is
``<component>.<pid>.<hex>``. A daemon thread in this (parent) process refreshes
``proctor:alive:<name>`` with ``PX liveness_ttl*1000`` every ``liveness_ttl/3`` s:
the relay treats a started job whose worker key is gone as abandoned, in seconds
rather than RQ's ~90 s + up to 600 s. The thread uses its own client, so the
horse never inherits a pool the thread might be holding at fork time.

Readiness: with ``settings.ready_file`` set (``$PROCTOR_READY_FILE``, set by the embedded
runner) the worker writes its pid there once its liveness key is set, right before its
first dequeue.
The supervisor counts the worker ready when the file names the live pid, so a
restart's measured time ends when the worker can really take a job.

Exit status: 0 after a requested stop or a finished burst, 1 on Valkey trouble or
any other unhandled error; the supervisor restarts the worker.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Sequence

from stack.priority import apply_niceness  # stdlib only: cheap before the heavy imports

# Workers of ai and sms yield the CPU to web nodes (accepting answers is the promise: p99 <= 1 s
# under worker kills; on 2 loaded cores a restarting worker's imports, ~1 CPU-second, or a horse
# would otherwise take its turn) and to the urgent merit lane, which runs at the web nodes' level
# (stack.priority.NICENESS; docs/lane-isolation.md "Figures" has what each level measured).
if __name__ == "__main__":  # before the heavy imports below, so a restart's imports run niced too
    apply_niceness(sys.argv[1] if len(sys.argv) > 1 else "")

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, SimpleWorker, Worker

from stack.components import LIVENESS_PREFIX, RELAY_LIVENESS, WORKER_STATE_PREFIX
from stack.config import Settings, load_settings
from stack.connection_stats import record_process_connections
from stack.valkey_client import valkey_client, warm_tls
from stack.lanes.allowlist import refusal
from stack.lanes.jobs import prepare_worker  # in the parent, so each forked horse starts warm
from stack.lanes.queues import JOB_SERIALIZER, LANES
from stack.valkey_acl import REFUSED_JOBS_KEY

__all__ = [
    "LIVENESS_PREFIX",
    "MAINTENANCE_INTERVAL",
    "RELAY_LIVENESS",
    "WORKER_TTL",
    "WORKER_CLASSES",
    "LaneRules",
    "LaneWorker",
    "LivenessBeat",
    "SimpleLaneWorker",
    "build_worker",
    "liveness_key",
    "main",
    "mark_ready",
    "worker_name",
]

MAINTENANCE_INTERVAL = 30
"""RQ cleans its registries every 30 s instead of the default 600 s."""

WORKER_TTL = 40
"""RQ blocks ``worker_ttl - 15`` = 25 s per dequeue with a 35 s socket timeout (default: 405/415 s),
so a wedged Valkey is noticed in about half a minute."""

log = logging.getLogger("proctor.worker")


def liveness_key(name: str) -> str:
    return f"{LIVENESS_PREFIX}{name}"


def worker_name(component: str, pid: int | None = None) -> str:
    """``worker_merit_1.4242.5f3a9c``: the pid alone repeats in a container (its own pid namespace),
    and RQ refuses a name whose registration a SIGKILLed predecessor left in Valkey."""
    return f"{component}.{os.getpid() if pid is None else pid}.{os.urandom(3).hex()}"


class LivenessBeat(threading.Thread):
    """Refreshes the liveness key; reports Valkey lost after a whole TTL without success and stops,
    unless ``on_lost`` is None (the relay: it works on the ledger meanwhile, and beats again later)."""

    def __init__(self, connection: Redis, name: str, ttl_seconds: float, on_lost: Callable[[], None] | None) -> None:
        super().__init__(name="proctor-liveness", daemon=True)
        self.connection = connection
        self.key = liveness_key(name)
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        self.interval = ttl_seconds / 3
        self.on_lost = on_lost
        self.stopped = threading.Event()

    def beat(self) -> None:
        self.connection.set(self.key, str(os.getpid()), px=self.ttl_ms)

    def run(self) -> None:
        last_ok = time.monotonic()
        while not self.stopped.wait(self.interval):
            try:
                self.beat()
                last_ok = time.monotonic()
            except RedisError as exc:
                log.warning("liveness refresh of %s failed: %s", self.key, exc)
                if self.on_lost is not None and time.monotonic() - last_ok > self.ttl_ms / 1000:
                    self.on_lost()
                    return

    def stop(self) -> None:
        self.stopped.set()
        try:
            self.connection.delete(self.key)
        except RedisError:
            pass  # the key expires on its own


def mark_ready(path: str | None, pid: int | None = None) -> None:
    """Write our pid to the ready file (atomically: a probe never reads half a pid)."""
    if not path:
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w") as out:
            out.write(str(os.getpid() if pid is None else pid))
        os.replace(tmp, path)
    except OSError as exc:  # readiness is then unknown to the supervisor, never fatal here
        log.warning("cannot write ready file %s: %s", path, exc)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m stack.lanes.worker")
    parser.add_argument("lane", choices=LANES)
    parser.add_argument("--name", default=None, help="component name (default: settings.component, i.e. $PROCTOR_COMPONENT, or worker_<lane>)")
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    return parser.parse_args(argv)


class LaneRules:
    """What every lane worker adds to RQ's, whichever way it runs a job: only allow-listed jobs
    run (stack/lanes/allowlist.py), a stop asked for is remembered (the exit status), and the
    worker's busy/idle state is published under its component name (``WORKER_STATE_PREFIX``)."""

    stop_signalled = False
    early_stop: threading.Event | None = None
    """Set by a SIGTERM that came before ``work`` put RQ's handlers in (see ``main``)."""
    component = ""
    """The supervised component this worker is (``worker_merit_1``): the key its state is published under."""

    def request_stop(self, signum: Any, frame: Any) -> None:
        self.stop_signalled = True
        super().request_stop(signum, frame)  # type: ignore[misc]

    def set_state(self, state: str, pipeline: Any = None) -> None:
        """RQ's state (``busy`` is written with the job's execution, before the job runs), and the
        same word under the component's name, in the same round trip: a worker running a job
        in-process has no horse for the harness to see."""
        pipe = self.connection.pipeline(transaction=False) if pipeline is None else pipeline  # type: ignore[attr-defined]
        super().set_state(state, pipeline=pipe)  # type: ignore[misc]
        pipe.set(f"{WORKER_STATE_PREFIX}{self.component}", state)
        if pipeline is None:
            pipe.execute()

    def publish_starting(self) -> None:
        """Before the ready file: a predecessor killed mid-job left ``busy`` under this name."""
        self.connection.set(f"{WORKER_STATE_PREFIX}{self.component}", "starting")  # type: ignore[attr-defined]

    def unsubscribe(self) -> None:
        """RQ's, in an order that cannot hang. RQ sends UNSUBSCRIBE, then stops the pubsub
        thread; when the thread reads the reply first it waits ``sleep_time`` (60 s) for a
        subscription, and redis-py 8.2's ``stop()`` joins it unbounded: a warm shutdown took
        up to a minute. Flag first, then UNSUBSCRIBE: its reply wakes the thread, which sees
        the flag and ends."""
        thread = self.pubsub_thread  # type: ignore[attr-defined]
        if not thread:
            return
        self.log.info("Worker %s: unsubscribing from channel %s", self.name, self.pubsub_channel_name)  # type: ignore[attr-defined]
        thread.stop(timeout=0)
        self.pubsub.unsubscribe()  # type: ignore[attr-defined]
        thread.join(timeout=1)  # RQ's bound; the thread is a daemon either way
        self.pubsub.close()  # type: ignore[attr-defined]

    def _install_signal_handlers(self) -> None:
        super()._install_signal_handlers()  # type: ignore[misc]
        # A stop asked for during start-up is kept: the loop's first check ends the work
        # cleanly (death registered), as a stop while idle would.
        if self.early_stop is not None and self.early_stop.is_set():
            self.stop_signalled = self._stop_requested = True

    def execute_job(self, job: Any, queue: Queue) -> None:
        reason = refusal(job)  # before a horse is forked or the function imported
        if reason is None:
            super().execute_job(job, queue)  # type: ignore[misc]
        else:
            self.refuse(job, queue, reason)

    def refuse(self, job: Any, queue: Queue, reason: str) -> None:
        """Off the lane into the failed registry, counted; written by hand so that nothing of
        the job (its data, callbacks, webhooks) is decoded again, saved or called."""
        with self.connection.pipeline() as pipe:  # type: ignore[attr-defined]
            pipe.lrem(queue.intermediate_queue_key, 1, job.id)
            pipe.hset(job.key, mapping={"status": "failed", "exc_info": f"refused by {self.name}: {reason}"})  # type: ignore[attr-defined]
            pipe.zadd(queue.failed_job_registry.key, {job.id: time.time() + 7 * 86400})
            pipe.incr(REFUSED_JOBS_KEY)
            pipe.execute()
        log.error("worker %s REFUSED job %s on lane %s: %s", self.name, job.id, queue.name, reason)  # type: ignore[attr-defined]


class LaneWorker(LaneRules, Worker):
    """The ``fork`` model: RQ's ``Worker``, a new horse (its own process group) per job."""


class SimpleLaneWorker(LaneRules, SimpleWorker):
    """The ``simple`` model: RQ's ``SimpleWorker``, the job runs in this process (no fork). RQ's
    job timeout still ends a runaway job: SIGALRM raises in this process's main thread."""


WORKER_CLASSES: dict[str, type[LaneWorker] | type[SimpleLaneWorker]] = {"fork": LaneWorker, "simple": SimpleLaneWorker}
"""``Settings.worker_models``' values (stack.config.WORKER_MODELS) -> the class; chosen once, in ``build_worker``."""


def build_worker(settings: Settings, lane: str, component: str) -> LaneWorker | SimpleLaneWorker:
    connection = valkey_client(settings, "queue")
    worker = WORKER_CLASSES[settings.worker_models[lane]](
        [Queue(lane, connection=connection, serializer=JOB_SERIALIZER)],
        name=worker_name(component),
        connection=connection,
        serializer=JOB_SERIALIZER,
        maintenance_interval=MAINTENANCE_INTERVAL,
        worker_ttl=WORKER_TTL,
    )
    worker.component = component
    return worker


def _remember_early_stop() -> threading.Event:
    """SIGTERM from here until ``work`` installs RQ's handlers sets the returned event.
    Without it a stop sent just after the ready file appeared (a supervisor's restart, a
    scale-in) was lost in the standby check, or killed the worker by the default action."""
    early_stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: early_stop.set())
    return early_stop


def _standby_until_lane(settings: Settings, stop: threading.Event) -> bool:
    """An SMS standby (stack/lanes/egress.py) takes no job until the deployment hands it the lane;
    False when a stop came first, while it waited or before."""
    from stack.lanes.egress import wait_for_lane

    return wait_for_lane(settings, stop)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = load_settings()
    warm_tls(settings)  # once here; every forked horse reuses it for its own Valkey connection
    if args.lane == "ai":
        from stack.lanes.ai.job import LaneConfig, check_startup

        check_startup(settings, LaneConfig.from_settings(settings))  # a job timeout past the slot lease stops start-up here
    prepare_worker(args.lane)  # settings, engines, and for ai/sms the HTTP stack: once, not per horse
    component = args.name or settings.component or f"worker_{args.lane}"
    stats = record_process_connections(settings)  # every horse forked below appends to this process's file
    worker = build_worker(settings, args.lane, component)
    valkey_lost = threading.Event()

    def lost() -> None:
        # RQ retries a lost connection forever while idle; we would rather be restarted
        # clean by the supervisor. SIGTERM = RQ's warm shutdown: a running horse finishes.
        # The idle pooled connections go first: they lead to the node that went silent, and the
        # shutdown's own writes (worker death, registries) would wait on them for a socket
        # timeout; fresh ones ask the Sentinels where the primary is now.
        log.error("worker %s: Valkey unreachable for a whole liveness TTL; stopping", worker.name)
        valkey_lost.set()
        worker.connection.connection_pool.disconnect(inuse_connections=False)
        os.kill(os.getpid(), signal.SIGTERM)

    beat = LivenessBeat(valkey_client(settings, "probe"), worker.name, settings.liveness_ttl, lost)
    worker.early_stop = _remember_early_stop()  # before the key and the ready file say we are up
    try:
        worker.publish_starting()
        beat.beat()  # before the first dequeue, so a job never starts without a key
        beat.start()
        mark_ready(settings.ready_file)
        if not _standby_until_lane(settings, worker.early_stop):
            # Stopped while a standby: by request (0), or by its own lost() (1), so that the
            # supervisor restarts it rather than taking a lost Valkey for a requested stop.
            return 1 if valkey_lost.is_set() else 0
        worker.work(burst=args.burst, logging_level="INFO")
    except RedisError as exc:
        log.error("worker %s: Valkey error: %s", worker.name, exc)
        return 1
    finally:
        beat.stop()
        stats.dump()
    if valkey_lost.is_set():
        return 1
    # Without a stop request or --burst, work() only returns after giving up on an error.
    return 0 if worker.stop_signalled or args.burst else 1


if __name__ == "__main__":
    sys.exit(main())
