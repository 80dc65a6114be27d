"""One toxic on one link: a :class:`Stage`, and the narrow :class:`StageContext` it runs in.

A toxic (``toxics.py``) is the configuration the API shows: name, stream, toxicity,
attributes.  It is shared by every connection of its proxy and direction.  What one
connection's direction needs on top (its toxicity roll, a bandwidth debt, a timeout
timer, bytes counted so far) lives in a stage the toxic opens for that link.  A stage
sees its link only through :class:`StageContext`: the clock, the seeded RNG, timers, an
interruptible sleep and ``close``, never the link's queue, loop or closing flag.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

if TYPE_CHECKING:  # pragma: no cover - import only for type checkers
    from .toxics import Toxic

__all__ = ["Chunk", "Emit", "Timer", "StageContext", "Stage"]


class Chunk:
    """Bytes as one ``recv`` returned them, stamped with the loop time they arrived."""

    __slots__ = ("data", "ts")

    def __init__(self, data: bytes, ts: float) -> None:
        self.data = data
        self.ts = ts


Emit = Callable[[Chunk], Awaitable[None]]
"""Hands a chunk on down the chain (to the next stage, or to the destination)."""


class Timer(Protocol):
    def cancel(self) -> None: ...


class StageContext(Protocol):
    """What a link offers the stages on it; a test passes a fake clock and RNG here."""

    @property
    def rng(self) -> random.Random:
        """Seeded per proxy x connection x direction (``--seed`` runs repeat)."""
        ...

    def now(self) -> float: ...

    @property
    def opened_at(self) -> float:
        """Loop time the proxy accepted this link's connection."""
        ...

    def roll(self, toxicity: float) -> bool: ...

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Timer: ...

    def is_active(self, stage: "Stage") -> bool:
        """The stage is on the link's chain, rolled on, and the link is open."""
        ...

    def hold(self, stage: "Stage", when: float) -> Awaitable[bool]:
        """Sleep until loop time ``when``; False if ``stage`` left the chain first."""
        ...

    def close(self) -> None:
        """Close the whole connection (both directions)."""
        ...


class Stage:
    """Base stage: passes data through (this alone is the ``noop`` toxic's).

    The link calls ``start`` once the stage is on its chain, ``restart`` on chain
    changes, ``remove`` when the toxic is deleted and ``stop`` when the link shuts down.
    """

    __slots__ = ("toxic", "ctx", "enabled")

    def __init__(self, toxic: "Toxic", ctx: StageContext) -> None:
        self.toxic = toxic
        self.ctx = ctx
        self.enabled = ctx.roll(toxic.toxicity)  # the toxicity roll for this link

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def restart(self) -> None:
        """Toxiproxy restarts a stage on chain changes; that re-rolls toxicity."""
        self.stop()
        self.enabled = self.ctx.roll(self.toxic.toxicity)
        self.start()

    def remove(self) -> None:
        self.stop()

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        await emit(chunk)

    async def on_eof(self) -> None:
        pass

    def attr(self, key: str) -> int:
        return self.toxic.attributes[key]

    def hold(self, when: float) -> Awaitable[bool]:
        return self.ctx.hold(self, when)

    def hold_for(self, seconds: float) -> Awaitable[bool]:
        return self.ctx.hold(self, self.ctx.now() + seconds)
