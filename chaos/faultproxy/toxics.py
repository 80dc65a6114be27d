"""The toxics, one class per Toxiproxy 2.12.0 type.

A toxic is the configuration the API shows, shared by all links of its proxy and
direction.  On each link it opens a stage (:mod:`.stage`) that holds that link's state
and runs the behaviour: ``pipe`` receives one chunk and calls ``emit`` for what goes on
down the chain (zero, one or several chunks).  Times are ms except the slicer's
``delay`` (µs), exactly as in Toxiproxy.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from .gojson import float32_json
from .link import DOWNSTREAM, UPSTREAM
from .stage import Chunk, Emit, Stage, StageContext, Timer

__all__ = [
    "Toxic", "NoopToxic", "LatencyToxic", "BandwidthToxic", "SlowCloseToxic",
    "TimeoutToxic", "ResetPeerToxic", "SlicerToxic", "LimitDataToxic", "SlowOpenToxic", "TOXIC_TYPES",
]


class Toxic:
    """Base toxic: passes data through (this alone is ``noop``)."""

    type_name: ClassVar[str] = "noop"
    struct_name: ClassVar[str] = "NoopToxic"
    fields: ClassVar[tuple[str, ...]] = ()
    stage_type: ClassVar[type[Stage]] = Stage

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

    def open_stage(self, ctx: StageContext) -> Stage:
        """This toxic on one more link; the link calls ``start`` once it holds it."""
        return self.stage_type(self, ctx)


class NoopToxic(Toxic):
    pass


class _LatencyStage(Stage):
    __slots__ = ()

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        jitter = self.attr("jitter")
        # Go: delay + rand.Int63n(2*jitter) - jitter, i.e. U in [-jitter, jitter-1].
        offset = self.ctx.rng.randrange(-jitter, jitter) if jitter > 0 else 0
        delay_ms = self.attr("latency") + offset
        if delay_ms > 0:
            # Counted from the chunk's arrival, so queued chunks pipeline.
            target = chunk.ts + delay_ms / 1000.0
            if await self.hold(target):
                chunk.ts = target  # stacked latencies add up
            # else: removed or re-rolled off mid-wait, so flush now
        await emit(chunk)


class LatencyToxic(Toxic):
    type_name = "latency"
    struct_name = "LatencyToxic"
    fields = ("latency", "jitter")
    stage_type = _LatencyStage


class _BandwidthStage(Stage):
    __slots__ = ("debt",)

    def __init__(self, toxic: Toxic, ctx: StageContext) -> None:
        super().__init__(toxic, ctx)
        self.debt = 0.0  # sleep carried between chunks (s)

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        rate = self.attr("rate")  # KB/s with KB = 1000 B, i.e. bytes per ms
        data = chunk.data
        self.debt += len(data) / rate / 1000.0
        piece = rate * 100  # bytes per 100 ms
        while len(data) > piece:
            if not await self.hold_for(0.1):
                await emit(Chunk(data, chunk.ts))  # removed: flush the rest now
                return
            await emit(Chunk(data[:piece], chunk.ts))
            data = data[piece:]
            self.debt -= 0.1
        start = self.ctx.now()
        await self.hold(start + self.debt)
        self.debt = max(0.0, self.debt - (self.ctx.now() - start))  # carry oversleep
        await emit(Chunk(data, chunk.ts))


class BandwidthToxic(Toxic):
    type_name = "bandwidth"
    struct_name = "BandwidthToxic"
    fields = ("rate",)
    stage_type = _BandwidthStage

    def check(self, attrs: dict[str, int]) -> str | None:
        if attrs["rate"] <= 0:
            return "bandwidth rate must be greater than 0 (KB/s)"
        return None


class _SlowCloseStage(Stage):
    __slots__ = ()

    async def on_eof(self) -> None:
        await self.hold_for(self.attr("delay") / 1000.0)


class SlowCloseToxic(Toxic):
    type_name = "slow_close"
    struct_name = "SlowCloseToxic"
    fields = ("delay",)
    stage_type = _SlowCloseStage


class _TimeoutStage(Stage):
    __slots__ = ("timer",)

    def __init__(self, toxic: Toxic, ctx: StageContext) -> None:
        super().__init__(toxic, ctx)
        self.timer: Timer | None = None

    def start(self) -> None:
        self._arm()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def remove(self) -> None:
        # Copied quirk: removing a timeout toxic closes the connection, even where
        # toxicity skipped it (Toxiproxy 2.12.0 behaves so).
        self.stop()
        self.ctx.close()

    def _arm(self) -> None:
        self.stop()
        timeout = self.attr("timeout")
        if timeout > 0 and self.ctx.is_active(self):
            self.timer = self.ctx.call_later(timeout / 1000.0, self.ctx.close)

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        self._arm()  # data resets the timer; the data itself is dropped


class TimeoutToxic(Toxic):
    type_name = "timeout"
    struct_name = "TimeoutToxic"
    fields = ("timeout",)
    stage_type = _TimeoutStage


class _ResetPeerStage(Stage):
    __slots__ = ("fired",)

    def __init__(self, toxic: Toxic, ctx: StageContext) -> None:
        super().__init__(toxic, ctx)
        self.fired = False

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        await self._fire()  # the first chunk is dropped

    async def on_eof(self) -> None:
        await self._fire()

    async def _fire(self) -> None:
        if self.fired:
            return
        self.fired = True
        if not await self.hold_for(self.attr("timeout") / 1000.0):
            return  # removed while waiting
        # The RST itself comes from SO_LINGER 0, set at accept while a reset_peer exists.
        self.ctx.close()


class ResetPeerToxic(Toxic):
    type_name = "reset_peer"
    struct_name = "ResetToxic"
    fields = ("timeout",)
    stage_type = _ResetPeerStage


class _SlicerStage(Stage):
    __slots__ = ()
    toxic: "SlicerToxic"

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        data = chunk.data
        start = 0
        delay = self.attr("delay") / 1_000_000.0  # microseconds
        for end in self.toxic.bounds(self.ctx.rng, len(data)):
            await emit(Chunk(data[start:end], chunk.ts))
            start = end
            if delay > 0 and self.ctx.is_active(self):
                await self.hold_for(delay)


class SlicerToxic(Toxic):
    type_name = "slicer"
    struct_name = "SlicerToxic"
    fields = ("average_size", "size_variation", "delay")
    stage_type = _SlicerStage

    def check(self, attrs: dict[str, int]) -> str | None:
        if attrs["average_size"] <= 0:
            return "slicer average_size must be greater than 0"
        return None

    def bounds(self, rng: random.Random, size: int) -> list[int]:
        """End offsets of the pieces ``size`` bytes are cut into."""
        avg = self.attributes["average_size"]
        var = max(0, self.attributes["size_variation"])
        ends: list[int] = []
        stack = [(0, size)]  # iterative version of Toxiproxy's recursive halving
        while stack:
            start, end = stack.pop()
            if (end - start) - avg <= var:
                ends.append(end)
                continue
            mid = start + (end - start) // 2
            if var > 0:
                mid += rng.randrange(2 * var) - var
            mid = min(max(mid, start + 1), end - 1)
            stack.append((mid, end))
            stack.append((start, mid))
        return ends


class _LimitDataStage(Stage):
    __slots__ = ("counter",)

    def __init__(self, toxic: Toxic, ctx: StageContext) -> None:
        super().__init__(toxic, ctx)
        self.counter = 0  # bytes forwarded; survives restarts, as in Toxiproxy

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        limit = self.attr("bytes")
        data = chunk.data
        room = max(0, limit - self.counter)
        if len(data) > room:
            data = data[:room]
        self.counter += len(data)
        if data:
            await emit(Chunk(data, chunk.ts))
        if self.counter >= limit:
            self.ctx.close()  # after the write, so the truncated bytes still arrive


class LimitDataToxic(Toxic):
    type_name = "limit_data"
    struct_name = "LimitDataToxic"
    fields = ("bytes",)
    stage_type = _LimitDataStage


class _SlowOpenStage(Stage):
    __slots__ = ("ready_at",)

    def __init__(self, toxic: Toxic, ctx: StageContext) -> None:
        super().__init__(toxic, ctx)
        jitter = self.attr("jitter")
        offset = ctx.rng.randrange(-jitter, jitter) if jitter > 0 else 0  # as latency's jitter
        self.ready_at = ctx.opened_at + max(0, self.attr("delay") + offset) / 1000.0

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.ts < self.ready_at:
            await self.hold(self.ready_at)  # removed mid-wait: flush now, as latency does
        await emit(chunk)


class SlowOpenToxic(Toxic):
    """Not in Toxiproxy: a server slow to accept. What arrives in the first ``delay`` ms
    (± ``jitter``, drawn once per link) of a connection's life waits until then; later data
    passes untouched. A TLS handshake (and anything else a new connection sends first) is
    slow, an established connection is not; ``latency`` slows every command instead."""

    type_name = "slow_open"
    struct_name = "SlowOpenToxic"
    fields = ("delay", "jitter")
    stage_type = _SlowOpenStage


TOXIC_TYPES: dict[str, type[Toxic]] = {
    cls.type_name: cls
    for cls in (NoopToxic, LatencyToxic, BandwidthToxic, SlowCloseToxic,
                TimeoutToxic, ResetPeerToxic, SlicerToxic, LimitDataToxic, SlowOpenToxic)
}
