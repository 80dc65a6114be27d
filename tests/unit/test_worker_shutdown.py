"""How a lane worker (stack.lanes.worker.LaneWorker) ends its pubsub listener.

The order is the fix: the thread's stop flag goes down before UNSUBSCRIBE is sent, so the
reply that wakes the thread finds the flag down. In RQ's order (UNSUBSCRIBE, then stop) a
thread that read the reply first waited 60 s for a subscription, and redis-py 8.2's
``stop()`` joined it: a warm shutdown took up to a minute. The end-to-end stops are in
tests/integration/test_relay.py.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

from stack.lanes.worker import LaneWorker


class Recorder:
    """A pubsub and its thread, writing every call into one list."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def stop(self, timeout: float | None = None) -> None:
        self.calls.append(f"thread.stop(timeout={timeout})")

    def join(self, timeout: float | None = None) -> None:
        self.calls.append(f"thread.join(timeout={timeout})")

    def unsubscribe(self) -> None:
        self.calls.append("pubsub.unsubscribe")

    def close(self) -> None:
        self.calls.append("pubsub.close")


def _worker(recorder: Recorder | None) -> SimpleNamespace:
    return SimpleNamespace(pubsub_thread=recorder, pubsub=recorder, log=logging.getLogger("test"),
                           name="worker_sms_1.1.x", pubsub_channel_name="rq:pubsub:worker_sms_1.1.x")


def test_the_thread_is_told_to_stop_before_the_unsubscribe_that_wakes_it() -> None:
    recorder = Recorder()
    LaneWorker.unsubscribe(_worker(recorder))  # type: ignore[arg-type]
    assert recorder.calls == ["thread.stop(timeout=0)", "pubsub.unsubscribe", "thread.join(timeout=1)", "pubsub.close"]


def test_a_worker_that_never_subscribed_has_nothing_to_end() -> None:
    LaneWorker.unsubscribe(_worker(None))  # type: ignore[arg-type]  # no AttributeError on a None pubsub
