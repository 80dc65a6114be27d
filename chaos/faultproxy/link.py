"""One direction of one proxied connection: source socket -> toxic chain -> destination.

The data path has two modes.  With no toxic enabled for this link and nothing queued,
``data_received`` writes straight into the destination transport (no task, no copy).
Otherwise chunks are queued and one worker task per busy link pushes them, in order,
through the enabled toxics' stages.  The link is the stages' :class:`~.stage.StageContext`;
their sleeps (:meth:`Link.hold`) are interrupted by chain changes, so that removals flush
buffered chunks at once.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from .stage import Chunk, Stage

if TYPE_CHECKING:  # pragma: no cover - import only for type checkers
    from .toxics import Toxic

__all__ = ["UPSTREAM", "DOWNSTREAM", "Endpoint", "Link", "Owner"]

UPSTREAM = "upstream"  # client -> server
DOWNSTREAM = "downstream"  # server -> client

# Queued bytes at which a slow link stops reading its source (Toxiproxy bounds its
# channels at 1024 chunks; a byte bound keeps memory flat under bandwidth toxics).
_PAUSE_AT = 4 << 20
_RESUME_AT = 1 << 20
# Destination write buffer: large so bulk copies rarely bounce through pause/resume.
_WRITE_HIGH = 1 << 20


class Owner(Protocol):
    """What a link needs from its connection."""

    def close(self) -> None: ...

    def finished(self, link: "Link") -> None: ...


class Endpoint(asyncio.Protocol):
    """One socket of a connection.  Reads feed ``link_in``; ``link_out`` writes here."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.link_in: Link | None = None
        self.peer: Endpoint | None = None  # the other socket of the connection
        self.on_connect: Callable[[Endpoint], None] | None = None
        self.closed = False
        self._pauses: set[str] = set()
        self._write_paused = False
        self._drain: asyncio.Future[None] | None = None
        self._held: deque[bytes | None] = deque()  # read while paused, in order (None: EOF)

    # --- asyncio.Protocol -------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=_WRITE_HIGH)
        if self._pauses:
            transport.pause_reading()
        if self.on_connect is not None:
            self.on_connect(self)

    def data_received(self, data: bytes) -> None:
        # Bytes can arrive while we asked to be paused: Python 3.11.2 (Debian 12's, the compose
        # image's) ignores a pause_reading() made inside connection_made, so a client's first
        # bytes came before its upstream socket existed and were written nowhere. Held, in order,
        # until the last pause is lifted.
        if self._pauses or self._held:
            self._held.append(data)
            return
        link = self.link_in
        if link is not None:
            link.feed(data)

    def eof_received(self) -> bool:
        if self._pauses or self._held:
            self._held.append(None)
        elif self.link_in is not None:
            self.link_in.feed_eof()
        return True  # keep the transport; the connection decides when to close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake_drain()
        if self._held:
            self._held.append(None)  # after what it still holds, if it is ever resumed
        elif self.link_in is not None:
            self.link_in.feed_eof()

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.peer is not None:
            self.peer.pause("dest")

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain()
        if self.peer is not None:
            self.peer.resume("dest")

    # --- helpers ------------------------------------------------------------------
    def pause(self, reason: str) -> None:
        if not self._pauses and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._pauses.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self._pauses:
            return
        self._pauses.discard(reason)
        self._release_held()
        if not self._pauses and self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def _release_held(self) -> None:
        """Feed what arrived while paused, until a new pause (a full queue) stops it."""
        while self._held and not self._pauses and self.link_in is not None:
            item = self._held.popleft()
            if item is None:
                self.link_in.feed_eof()
            else:
                self.link_in.feed(item)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    async def drained(self) -> None:
        """Wait until the destination buffer is below its high-water mark."""
        while self._write_paused and not self.closed:
            if self._drain is None:
                self._drain = asyncio.get_running_loop().create_future()
            await self._drain

    def _wake_drain(self) -> None:
        if self._drain is not None:
            if not self._drain.done():
                self._drain.set_result(None)
            self._drain = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()  # flushes what is buffered, then FIN (or RST with linger 0)


def _fire(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


class Link:
    """One direction of one connection through that direction's toxic chain."""

    def __init__(
        self,
        owner: Owner,
        direction: str,
        source: Endpoint,
        dest: Endpoint,
        chain: list[Toxic],
        seed: str,
    ) -> None:
        self.owner = owner
        self.direction = direction
        self.source = source
        self.dest = dest
        self.chain = chain  # the proxy's live list for this direction (shared, ordered)
        self.loop = asyncio.get_running_loop()
        self.opened_at = self.loop.time()  # links are made at accept (StageContext.opened_at)
        self.closing = False
        self.done = False  # the source's EOF went through the whole chain
        self._seed = seed
        self._rng: random.Random | None = None
        self._stages: dict[Toxic, Stage] = {}
        self._active = False
        self._queue: deque[Chunk | None] = deque()
        self._queued = 0
        self._eof = False
        self._worker: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[bool] | None = None
        source.link_in = self
        for toxic in chain:
            self._open(toxic)
        self._recompute()

    # --- StageContext: what the stages see of the link ---------------------------------
    @property
    def rng(self) -> random.Random:
        # Seeded per proxy x connection x direction, so a --seed run is reproducible
        # whatever order connections' callbacks interleave in.
        if self._rng is None:
            self._rng = random.Random(self._seed)
        return self._rng

    def roll(self, toxicity: float) -> bool:
        """Toxicity roll as Toxiproxy does it: ``rand.Float32() < toxicity``."""
        if toxicity >= 1.0:
            return True
        if toxicity <= 0.0:
            return False
        return self.rng.random() < toxicity

    def now(self) -> float:
        return self.loop.time()

    def call_later(self, delay: float, callback: Callable[[], Any]) -> asyncio.TimerHandle:
        return self.loop.call_later(delay, callback)

    def is_active(self, stage: Stage) -> bool:
        return stage.enabled and not self.closing and self._stages.get(stage.toxic) is stage

    async def hold(self, stage: Stage, when: float) -> bool:
        while not await self._sleep_until(when):
            if not self.is_active(stage):
                return False
        return True

    async def _sleep_until(self, when: float) -> bool:
        # False if a chain change woke us early.
        if when <= self.loop.time():
            return True
        fut: asyncio.Future[bool] = self.loop.create_future()
        self._wake = fut
        handle = self.loop.call_at(when, _fire, fut, True)
        try:
            return await fut
        finally:
            handle.cancel()
            if self._wake is fut:
                self._wake = None

    def close(self) -> None:
        self.owner.close()

    # --- data in ------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if self._eof or self.closing:
            return
        if not self._active and self._worker is None:
            self.dest.write(data)  # fast path: no toxic, nothing queued
            return
        self._queue.append(Chunk(data, self.loop.time()))
        self._queued += len(data)
        if self._queued >= _PAUSE_AT:
            self.source.pause("queue")
        self._kick()

    def feed_eof(self) -> None:
        if self._eof or self.closing:
            return
        self._eof = True
        if not self._active and self._worker is None:
            self._finish()
            return
        self._queue.append(None)
        self._kick()

    def _finish(self) -> None:
        # No half-close: the connection closes our destination, and the other direction
        # then sees EOF and runs its own chain (so its slow_close still delays).
        self.done = True
        self.owner.finished(self)

    def _kick(self) -> None:
        if self._worker is None:
            self._worker = self.loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._queue and not self.closing:
                item = self._queue.popleft()
                if item is None:
                    await self._eof_through(-1)
                    if not self.closing:
                        self._finish()
                    return
                self._queued -= len(item.data)
                if self._queued <= _RESUME_AT:
                    self.source.resume("queue")
                await self._through(item, -1)
        except asyncio.CancelledError:
            pass  # the connection closed under us; nothing to deliver any more
        finally:
            self._worker = None

    # --- chain walking ------------------------------------------------------------
    def _next(self, after: int) -> Stage | None:
        # Walk the live chain by insertion number so adds/removals mid-chunk are safe.
        for toxic in self.chain:
            if toxic.seq > after:
                stage = self._stages.get(toxic)
                if stage is not None and stage.enabled:
                    return stage
        return None

    async def _through(self, chunk: Chunk, after: int) -> None:
        if self.closing:
            return
        stage = self._next(after)
        if stage is None:
            await self._write(chunk.data)
            return
        seq = stage.toxic.seq

        def emit(c: Chunk) -> Awaitable[None]:
            return self._through(c, seq)

        await stage.pipe(chunk, emit)

    async def _eof_through(self, after: int) -> None:
        stage = self._next(after)
        while stage is not None and not self.closing:
            await stage.on_eof()
            stage = self._next(stage.toxic.seq)

    async def _write(self, data: bytes) -> None:
        if not data or self.closing:
            return
        self.dest.write(data)
        await self.dest.drained()

    # --- chain changes (called by the proxy, synchronously) ---------------------
    def added(self, toxic: Toxic, previous_tail: Toxic | None) -> None:
        if previous_tail is not None:
            self.restart(previous_tail)
        self._open(toxic)
        self._changed()

    def restart(self, toxic: Toxic) -> None:
        stage = self._stages.get(toxic)
        if stage is not None:
            stage.restart()
        self._changed()

    def removed(self, toxic: Toxic, predecessor: Toxic | None) -> None:
        stage = self._stages.pop(toxic, None)
        if stage is not None:
            stage.remove()
        if predecessor is not None:
            self.restart(predecessor)
        self._changed()

    def _open(self, toxic: Toxic) -> None:
        stage = toxic.open_stage(self)
        self._stages[toxic] = stage  # first, so that start() sees itself active
        stage.start()

    def _changed(self) -> None:
        self._recompute()
        if self._wake is not None:
            _fire(self._wake, False)

    def _recompute(self) -> None:
        self._active = any(stage.enabled for stage in self._stages.values())

    def shutdown(self) -> None:
        """Stop for good: cancel timers and the worker.  Idempotent."""
        if self.closing:
            return
        self.closing = True
        for stage in self._stages.values():
            stage.stop()
        if self._worker is not None:
            self._worker.cancel()
        if self._wake is not None:
            _fire(self._wake, False)
        self._queue.clear()
