"""The toxics, one class per Toxiproxy 2.12.0 type.

A toxic is shared by all links of its proxy and direction; per-link state lives in a
:class:`~.link.StageState`.  ``pipe`` receives one chunk and calls ``emit`` for what
goes on down the chain (zero, one or several chunks).  Times are ms except the
slicer's ``delay`` (µs), exactly as in Toxiproxy.
"""

from __future__ import annotations

import struct
from typing import Any, Awaitable, Callable, ClassVar

from .link import DOWNSTREAM, UPSTREAM, Chunk, Link, StageState

__all__ = [
    "Toxic", "NoopToxic", "LatencyToxic", "BandwidthToxic", "SlowCloseToxic",
    "TimeoutToxic", "ResetPeerToxic", "SlicerToxic", "LimitDataToxic",
    "TOXIC_TYPES", "float32", "float32_json",
]

Emit = Callable[[Chunk], Awaitable[None]]


def float32(value: float) -> float:
    """Round to float32, like Toxiproxy's ``toxicity`` field."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def float32_json(value: float) -> int | float:
    """Shortest float32 spelling (Go prints ``0.1``, not ``0.10000000149011612``)."""
    if value.is_integer() and abs(value) < 1e21:
        return int(value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if float32(float(text)) == value:
            return float(text)
    return value


class Toxic:
    """Base toxic: passes data through (this alone is ``noop``)."""

    type_name: ClassVar[str] = "noop"
    struct_name: ClassVar[str] = "NoopToxic"
    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str, stream: str, toxicity: float, seq: int) -> None:
        self.name = name
        self.stream = stream  # echoed verbatim (case kept)
        self.direction = UPSTREAM if stream.lower() == UPSTREAM else DOWNSTREAM
        self.toxicity = toxicity
        self.seq = seq  # insertion number; orders the chain
        self.attributes: dict[str, int] = {f: 0 for f in self.fields}

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type_name,
            "stream": self.stream,
            "toxicity": float32_json(self.toxicity),
        }

    def check(self, attrs: dict[str, int]) -> str | None:
        """Guard for values the real server crashes or black-holes on; None if fine."""
        return None

    def attr(self, key: str) -> int:
        return self.attributes[key]

    # --- per-link lifecycle ----------------------------------------------------
    def new_state(self, link: Link) -> StageState:
        st = StageState(link.roll(self.toxicity))
        self.started(link, st)
        return st

    def restart(self, link: Link, st: StageState) -> None:
        """Toxiproxy restarts a stage on chain changes; that re-rolls toxicity."""
        self.discard(link, st)
        st.enabled = link.roll(self.toxicity)
        self.started(link, st)

    def started(self, link: Link, st: StageState) -> None:
        pass

    def discard(self, link: Link, st: StageState) -> None:
        pass

    def remove(self, link: Link, st: StageState) -> None:
        self.discard(link, st)

    # --- data ------------------------------------------------------------------------
    async def pipe(self, link: Link, st: StageState, chunk: Chunk, emit: Emit) -> None:
        await emit(chunk)

    async def on_eof(self, link: Link, st: StageState) -> None:
        pass


class NoopToxic(Toxic):
    pass


class LatencyToxic(Toxic):
    type_name = "latency"
    struct_name = "LatencyToxic"
    fields = ("latency", "jitter")

    async def pipe(self, link: Link, st: StageState, chunk: Chunk, emit: Emit) -> None:
        jitter = self.attr("jitter")
        # Go: delay + rand.Int63n(2*jitter) - jitter, i.e. U in [-jitter, jitter-1].
        offset = link.rng.randrange(-jitter, jitter) if jitter > 0 else 0
        delay_ms = self.attr("latency") + offset
        if delay_ms > 0:
            # Counted from the chunk's arrival, so queued chunks pipeline.
            target = chunk.ts + delay_ms / 1000.0
            if await link.hold(self, target):
                chunk.ts = target  # stacked latencies add up
            # else: removed or re-rolled off mid-wait, so flush now
        await emit(chunk)


class BandwidthToxic(Toxic):
    type_name = "bandwidth"
    struct_name = "BandwidthToxic"
    fields = ("rate",)

    def check(self, attrs: dict[str, int]) -> str | None:
        if attrs["rate"] <= 0:
            return "bandwidth rate must be greater than 0 (KB/s)"
        return None

    async def pipe(self, link: Link, st: StageState, chunk: Chunk, emit: Emit) -> None:
        rate = self.attr("rate")  # KB/s with KB = 1000 B, i.e. bytes per ms
        data = chunk.data
        st.debt += len(data) / rate / 1000.0
        piece = rate * 100  # bytes per 100 ms
        while len(data) > piece:
            if not await link.hold(self, link.loop.time() + 0.1):
                await emit(Chunk(data, chunk.ts))  # removed: flush the rest now
                return
            await emit(Chunk(data[:piece], chunk.ts))
            data = data[piece:]
            st.debt -= 0.1
        start = link.loop.time()
        await link.hold(self, start + st.debt)
        st.debt = max(0.0, st.debt - (link.loop.time() - start))  # carry oversleep
        await emit(Chunk(data, chunk.ts))


class SlowCloseToxic(Toxic):
    type_name = "slow_close"
    struct_name = "SlowCloseToxic"
    fields = ("delay",)

    async def on_eof(self, link: Link, st: StageState) -> None:
        await link.hold(self, link.loop.time() + self.attr("delay") / 1000.0)


class TimeoutToxic(Toxic):
    type_name = "timeout"
    struct_name = "TimeoutToxic"
    fields = ("timeout",)

    def started(self, link: Link, st: StageState) -> None:
        self._arm(link, st)

    def discard(self, link: Link, st: StageState) -> None:
        if st.timer is not None:
            st.timer.cancel()
            st.timer = None

    def remove(self, link: Link, st: StageState) -> None:
        # Copied quirk: removing a timeout toxic closes the connection, even where
        # toxicity skipped it (Toxiproxy 2.12.0 behaves so).
        self.discard(link, st)
        link.close()

    def _arm(self, link: Link, st: StageState) -> None:
        self.discard(link, st)
        timeout = self.attr("timeout")
        if st.enabled and timeout > 0 and not link.closing:
            st.timer = link.loop.call_later(timeout / 1000.0, link.close)

    async def pipe(self, link: Link, st: StageState, chunk: Chunk, emit: Emit) -> None:
        self._arm(link, st)  # data resets the timer; the data itself is dropped


class ResetPeerToxic(Toxic):
    type_name = "reset_peer"
    struct_name = "ResetToxic"
    fields = ("timeout",)

    async def pipe(self, link: Link, st: StageState, chunk: Chunk, emit: Emit) -> None:
        await self._fire(link, st)  # the first chunk is dropped

    async def on_eof(self, link: Link, st: StageState) -> None:
        await self._fire(link, st)

    async def _fire(self, link: Link, st: StageState) -> None:
        if st.fired:
            return
        st.fired = True
        if not await link.hold(self, link.loop.time() + self.attr("timeout") / 1000.0):
            return  # removed while waiting
        # The RST itself comes from SO_LINGER 0, set at accept while a reset_peer exists.
        link.close()


class SlicerToxic(Toxic):
    type_name = "slicer"
    struct_name = "SlicerToxic"
    fields = ("average_size", "size_variation", "delay")

    def check(self, attrs: dict[str, int]) -> str | None:
        if attrs["average_size"] <= 0:
            return "slicer average_size must be greater than 0"
        return None

    def _bounds(self, link: Link, size: int) -> list[int]:
        avg = self.attr("average_size")
        var = max(0, self.attr("size_variation"))
        ends: list[int] = []
        stack = [(0, size)]  # iterative version of Toxiproxy's recursive halving
        while stack:
            start, end = stack.pop()
            if (end - start) - avg <= var:
                ends.append(end)
                continue
            mid = start + (end - start) // 2
            if var > 0:
                mid += link.rng.randrange(2 * var) - var
            mid = min(max(mid, start + 1), end - 1)
            stack.append((mid, end))
            stack.append((start, mid))
        return ends

    async def pipe(self, link: Link, st: StageState, chunk: Chunk, emit: Emit) -> None:
        data = chunk.data
        start = 0
        delay = self.attr("delay") / 1_000_000.0  # microseconds
        for end in self._bounds(link, len(data)):
            await emit(Chunk(data[start:end], chunk.ts))
            start = end
            if delay > 0 and link.is_active(self):
                await link.hold(self, link.loop.time() + delay)


class LimitDataToxic(Toxic):
    type_name = "limit_data"
    struct_name = "LimitDataToxic"
    fields = ("bytes",)

    async def pipe(self, link: Link, st: StageState, chunk: Chunk, emit: Emit) -> None:
        limit = self.attr("bytes")
        data = chunk.data
        room = max(0, limit - st.counter)
        if len(data) > room:
            data = data[:room]
        st.counter += len(data)
        if data:
            await emit(Chunk(data, chunk.ts))
        if st.counter >= limit:
            link.close()  # after the write, so the truncated bytes still arrive


TOXIC_TYPES: dict[str, type[Toxic]] = {
    cls.type_name: cls
    for cls in (NoopToxic, LatencyToxic, BandwidthToxic, SlowCloseToxic,
                TimeoutToxic, ResetPeerToxic, SlicerToxic, LimitDataToxic)
}
