"""The toxics' computed schedules, on an injected clock and RNG (no sockets, no sleeping).

``FakeLink`` is the :class:`chaos.faultproxy.stage.StageContext` a real link would be:
``hold`` records the loop time a stage waits for and advances the fake clock to it at
once, so each test reads the exact delays a toxic computed.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Callable

import pytest

from chaos.faultproxy.stage import Chunk, Stage
from chaos.faultproxy.toxics import (BandwidthToxic, LatencyToxic, LimitDataToxic, SlowCloseToxic,
                                     SlowOpenToxic, TimeoutToxic, Toxic)


class FakeTimer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        self.timers.append(FakeTimer(self.now + delay, callback))
        return self.timers[-1]


class FakeLink:
    def __init__(self, seed: str = "1") -> None:
        self.loop = FakeLoop()
        self.rng = random.Random(seed)
        self.closed = 0
        self.holds: list[float] = []  # every loop time a toxic waited for
        self.opened_at = 0.0  # the connection was accepted at fake time 0

    def now(self) -> float:
        return self.loop.time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        return self.loop.call_later(delay, callback)

    def roll(self, toxicity: float) -> bool:
        return True

    def is_active(self, stage: Stage) -> bool:
        return True

    async def hold(self, stage: Stage, when: float) -> bool:
        self.holds.append(when)
        self.loop.now = max(self.loop.now, when)
        return True

    def close(self) -> None:
        self.closed += 1


def _toxic(cls: type[Toxic], **attrs: int) -> Toxic:
    toxic = cls("t", "downstream", 1.0, 1)
    toxic.attributes.update(attrs)
    return toxic


def _started(toxic: Toxic, link: FakeLink) -> Stage:
    stage = toxic.open_stage(link)
    stage.start()
    return stage


def _pipe(toxic: Toxic, link: FakeLink, chunks: list[Chunk]) -> list[tuple[float, bytes]]:
    """Push ``chunks`` through ``toxic``; (fake time, data) of what it emitted."""
    out: list[tuple[float, bytes]] = []

    async def emit(chunk: Chunk) -> None:
        out.append((link.loop.now, chunk.data))

    async def run() -> None:
        stage = _started(toxic, link)
        for chunk in chunks:
            await stage.pipe(chunk, emit)

    asyncio.run(run())
    return out


def test_latency_is_counted_from_arrival_so_chunks_pipeline() -> None:
    link = FakeLink()
    arrivals = [i * 0.01 for i in range(20)]  # 20 chunks, 10 ms apart
    _pipe(_toxic(LatencyToxic, latency=100), link, [Chunk(b"x", t) for t in arrivals])
    assert link.holds == pytest.approx([t + 0.1 for t in arrivals])  # not 0.1, 0.2, … 2.0


def _jitter_offsets_ms(seed: str, n: int = 2000) -> list[int]:
    link = FakeLink(seed)
    _pipe(_toxic(LatencyToxic, latency=60, jitter=40), link, [Chunk(b"x", 0.0) for _ in range(n)])
    return [round(when * 1000) - 60 for when in link.holds]


def test_jitter_spans_go_range() -> None:
    offsets = _jitter_offsets_ms("1")
    assert min(offsets) == -40 and max(offsets) == 39  # U in [-jitter, jitter-1], as Go


def test_same_seed_same_jitter_sequence() -> None:
    assert _jitter_offsets_ms("7:p:1:down") == _jitter_offsets_ms("7:p:1:down")
    assert _jitter_offsets_ms("7:p:1:down") != _jitter_offsets_ms("8:p:1:down")


def test_stacked_latencies_add_through_the_chunk_stamp() -> None:
    link = FakeLink()
    first, second = _toxic(LatencyToxic, latency=100), _toxic(LatencyToxic, latency=30)
    chunk = Chunk(b"x", 0.0)
    _pipe(first, link, [chunk])
    _pipe(second, link, [chunk])
    assert link.holds == pytest.approx([0.1, 0.13])


def test_bandwidth_sleeps_len_over_rate() -> None:
    link = FakeLink()
    out = _pipe(_toxic(BandwidthToxic, rate=100), link,
                [Chunk(b"z" * 5_000, 0.0), Chunk(b"z" * 25_000, 0.0)])
    # 100 KB/s = 100 B/ms: 5 000 B wait 50 ms; 25 000 B go as 10 000 B slices every 100 ms
    # and the 5 000 B rest, 50 ms later.
    assert [len(data) for _, data in out] == [5_000, 10_000, 10_000, 5_000]
    assert [when for when, _ in out] == pytest.approx([0.05, 0.15, 0.25, 0.3])


def test_slow_close_waits_its_delay_on_eof() -> None:
    link = FakeLink()
    toxic = _toxic(SlowCloseToxic, delay=500)
    asyncio.run(_started(toxic, link).on_eof())
    assert link.holds == [0.5]


def test_timeout_restarts_on_data_and_drops_it() -> None:
    link = FakeLink()
    toxic = _toxic(TimeoutToxic, timeout=300)
    out: list[Any] = []
    stage = _started(toxic, link)
    first = link.loop.timers[-1]
    assert first.when == pytest.approx(0.3)
    link.loop.now = 0.2

    async def emit(chunk: Chunk) -> None:
        out.append(chunk)

    asyncio.run(stage.pipe(Chunk(b"data", 0.2), emit))
    assert out == []  # dropped
    assert first.cancelled and link.loop.timers[-1].when == pytest.approx(0.5)
    link.loop.timers[-1].callback()
    assert link.closed == 1


def test_each_link_keeps_its_own_stage_state() -> None:
    # One toxic on two connections: limit_data counts bytes per link, so the first link
    # reaching the limit closes only itself (a counter kept on the toxic would close both).
    toxic = _toxic(LimitDataToxic, bytes=10)
    first, second = FakeLink(), FakeLink()
    stages = [(_started(toxic, link), link) for link in (first, second)]

    async def emit(chunk: Chunk) -> None:
        pass

    async def run() -> None:
        for stage, _ in stages:
            await stage.pipe(Chunk(b"x" * 8, 0.0), emit)
        assert (first.closed, second.closed) == (0, 0)
        await stages[0][0].pipe(Chunk(b"x" * 8, 0.0), emit)

    asyncio.run(run())
    assert (first.closed, second.closed) == (1, 0)


def test_slow_open_holds_what_arrives_before_the_connection_is_delay_old_and_nothing_after() -> None:
    link = FakeLink()
    out = _pipe(_toxic(SlowOpenToxic, delay=300), link,
                [Chunk(b"hello", 0.0), Chunk(b"finished", 0.1), Chunk(b"command", 0.5)])
    assert link.holds == pytest.approx([0.3, 0.3])  # the handshake's chunks wait until the link is 300 ms old
    assert [data for _, data in out] == [b"hello", b"finished", b"command"]  # order kept, the later chunk not held


def test_slow_open_counts_from_the_accept_so_an_old_connection_is_spared() -> None:
    link = FakeLink()
    link.opened_at = -10.0  # accepted 10 s before the toxic was added
    _pipe(_toxic(SlowOpenToxic, delay=300), link, [Chunk(b"x", 0.0)])
    assert link.holds == []


def test_slow_open_jitter_is_drawn_once_per_link_within_its_range() -> None:
    delays = set()
    for seed in range(200):
        link = FakeLink(str(seed))
        _pipe(_toxic(SlowOpenToxic, delay=300, jitter=100), link, [Chunk(b"a", 0.0), Chunk(b"b", 0.0)])
        assert link.holds[0] == link.holds[1]  # one delay per link, not per chunk
        delays.add(round(link.holds[0] * 1000))
    assert min(delays) >= 200 and max(delays) <= 399 and len(delays) > 50
