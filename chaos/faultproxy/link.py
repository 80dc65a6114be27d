"""One direction of one proxied connection: source socket -> toxic chain -> destination.

The data path has two modes.  With no toxic enabled for this link and nothing queued,
``data_received`` writes straight into the destination transport (no task, no copy).
Otherwise chunks are queued and one worker task per busy link pushes them, in order,
through the enabled toxics.  Toxics sleep with :meth:`Link.sleep_until`, which a chain
change interrupts so that removals flush buffered chunks at once.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol

if TYPE_CHECKING:  # pragma: no cover - import only for type checkers
    from .toxics import Toxic

__all__ = ["UPSTREAM", "DOWNSTREAM", "Chunk", "StageState", "Endpoint", "Link", "Owner"]

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


class Chunk:
    """Bytes as one ``recv`` returned them, stamped with the loop time they arrived."""

    __slots__ = ("data", "ts")

    def __init__(self, data: bytes, ts: float) -> None:
        self.data = data
        self.ts = ts


class StageState:
    """Per link x toxic state.  ``enabled`` is the toxicity roll for this link."""

    __slots__ = ("enabled", "counter", "timer", "debt", "fired")

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.counter = 0  # limit_data: bytes forwarded (survives restarts)
        self.timer: asyncio.TimerHandle | None = None  # timeout toxic
        self.debt = 0.0  # bandwidth: sleep carried between chunks (s)
        self.fired = False  # reset_peer: already triggered


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
        link = self.link_in
        if link is not None:
            link.feed(data)

    def eof_received(self) -> bool:
        if self.link_in is not None:
            self.link_in.feed_eof()
        return True  # keep the transport; the connection decides when to close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake_drain()
        if self.link_in is not None:
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
        if not self._pauses and self.transport is not None and not self.closed:
            self.transport.resume_reading()

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
        self.closing = False
        self.done = False  # the source's EOF went through the whole chain
        self._seed = seed
        self._rng: random.Random | None = None
        self._states: dict[Toxic, StageState] = {}
        self._active = False
        self._queue: deque[Chunk | None] = deque()
        self._queued = 0
        self._eof = False
        self._worker: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[bool] | None = None
        source.link_in = self
        for toxic in chain:
            self._states[toxic] = toxic.new_state(self)
        self._recompute()

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
    def _next(self, after: int) -> tuple[Toxic, StageState] | None:
        # Walk the live chain by insertion number so adds/removals mid-chunk are safe.
        for toxic in self.chain:
            if toxic.seq > after:
                st = self._states.get(toxic)
                if st is not None and st.enabled:
                    return toxic, st
        return None

    async def _through(self, chunk: Chunk, after: int) -> None:
        if self.closing:
            return
        nxt = self._next(after)
        if nxt is None:
            await self._write(chunk.data)
            return
        toxic, st = nxt
        seq = toxic.seq

        def emit(c: Chunk) -> Awaitable[None]:
            return self._through(c, seq)

        await toxic.pipe(self, st, chunk, emit)

    async def _eof_through(self, after: int) -> None:
        nxt = self._next(after)
        while nxt is not None and not self.closing:
            toxic, st = nxt
            await toxic.on_eof(self, st)
            nxt = self._next(toxic.seq)

    async def _write(self, data: bytes) -> None:
        if not data or self.closing:
            return
        self.dest.write(data)
        await self.dest.drained()

    # --- services for toxics ------------------------------------------------------
    def is_active(self, toxic: Toxic) -> bool:
        st = self._states.get(toxic)
        return st is not None and st.enabled and not self.closing

    async def sleep_until(self, when: float) -> bool:
        """Sleep until loop time ``when``; False if a chain change woke us early."""
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

    async def hold(self, toxic: Toxic, when: float) -> bool:
        """Sleep until ``when`` for ``toxic``; False if it left this link's chain early."""
        while not await self.sleep_until(when):
            if not self.is_active(toxic):
                return False
        return True

    def close(self) -> None:
        self.owner.close()

    # --- chain changes (called by the proxy, synchronously) ---------------------
    def added(self, toxic: Toxic, previous_tail: Toxic | None) -> None:
        if previous_tail is not None:
            self.restart(previous_tail)
        self._states[toxic] = toxic.new_state(self)
        self._changed()

    def restart(self, toxic: Toxic) -> None:
        st = self._states.get(toxic)
        if st is not None:
            toxic.restart(self, st)
        self._changed()

    def removed(self, toxic: Toxic, predecessor: Toxic | None) -> None:
        st = self._states.pop(toxic, None)
        if st is not None:
            toxic.remove(self, st)
        if predecessor is not None:
            self.restart(predecessor)
        self._changed()

    def _changed(self) -> None:
        self._recompute()
        if self._wake is not None:
            _fire(self._wake, False)

    def _recompute(self) -> None:
        self._active = any(st.enabled for st in self._states.values())

    def shutdown(self) -> None:
        """Stop for good: cancel timers and the worker.  Idempotent."""
        if self.closing:
            return
        self.closing = True
        for toxic, st in self._states.items():
            toxic.discard(self, st)
        if self._worker is not None:
            self._worker.cancel()
        if self._wake is not None:
            _fire(self._wake, False)
        self._queue.clear()
