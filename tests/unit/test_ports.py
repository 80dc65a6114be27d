"""stack/deploy/ports.py: free ports, and the disjoint slices that keep side-by-side stacks
(pytest-xdist workers) from racing for one port between its draw and its bind."""

from __future__ import annotations

import pytest

from stack.deploy import ports


def test_without_a_range_ports_come_from_the_default_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ports.PORT_RANGE_ENV, raising=False)
    assert ports.listen_ports() == range(20000, 32768)


def test_worker_slices_are_disjoint_and_cover_no_port_twice() -> None:
    slices = [ports.port_slice(i, 3) for i in range(3)]
    spans = [tuple(int(x) for x in s.split("-")) for s in slices]
    for (low_a, high_a), (low_b, _high_b) in zip(spans, spans[1:]):
        assert high_a < low_b
    assert spans[0][0] == 20000 and spans[-1][1] <= 32767


def test_free_port_stays_inside_the_worker_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ports.PORT_RANGE_ENV, ports.port_slice(1, 2))
    low, high = (int(x) for x in ports.port_slice(1, 2).split("-"))
    drawn = ports.free_ports(20)
    assert all(low <= port <= high for port in drawn), drawn


@pytest.mark.parametrize("value", ["20000", "a-b", "20000-20010", "1000-30000", "30000-40000"])
def test_a_bad_range_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ports.PORT_RANGE_ENV, value)
    with pytest.raises(ValueError, match=ports.PORT_RANGE_ENV):
        ports.listen_ports()
