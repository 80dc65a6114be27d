"""The answer hold: a provider records a new effect, then keeps its answer until it is let go.

``delay_after_effect_seconds`` (faults.py) holds every answer for a fixed time, which a kill
timed after an effect must beat. A saturated machine once did not: a compose failover landed
1.56 s after the effect, past a 1 s hold (CI, 6 December 2026), so the job it meant to catch in
flight may already have heard. The hold has no clock. ``POST /admin/hold`` arms it; every new
effect's answer then waits, listed by ``GET /admin/hold``, until ``DELETE /admin/hold`` lets
them all go and disarms. A nemesis arms it, strikes once an answer is held, and releases once
its strike has landed (chaos/nemesis/provider.py ``answer_held``): the caller hears only after
the kill, however slow the machine. A replayed effect is never held (it is not new).
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["AnswerHold"]


class AnswerHold:
    """Armed or not, and the effects whose answers wait, in one provider process."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._armed = False
        self._held: dict[int, float] = {}  # effect id -> its created_at

    def arm(self) -> dict[str, Any]:
        with self._changed:
            self._armed = True
            return self.state()

    def release(self) -> dict[str, Any]:
        """Disarm and let every held answer go; returns what was held, and when it was let go."""
        with self._changed:
            released = self.state()["held"]
            self._armed = False
            self._changed.notify_all()
            return {"armed": False, "released": released, "released_at": time.time()}

    def state(self) -> dict[str, Any]:
        with self._changed:
            held = [{"id": effect_id, "created_at": created_at} for effect_id, created_at in sorted(self._held.items())]
            return {"armed": self._armed, "held": held}

    def wait(self, effect_id: int, created_at: float) -> None:
        """Called between recording a new effect and answering: returns at once unless armed."""
        with self._changed:
            if not self._armed:
                return
            self._held[effect_id] = created_at
            try:
                self._changed.wait_for(lambda: not self._armed)
            finally:
                del self._held[effect_id]
