"""chaos/deployment/compose_nets.py: each compose-pass worker's projects get networks of their own."""

from __future__ import annotations

import pytest

from chaos.deployment import compose_nets


def test_the_first_worker_keeps_the_defaults_and_each_next_one_moves_both_networks(monkeypatch) -> None:
    monkeypatch.delenv(compose_nets.NET_ENV, raising=False)
    monkeypatch.delenv(compose_nets.EGRESS_NET_ENV, raising=False)
    nets = [compose_nets.for_worker(i) for i in range(3)]
    assert nets[0] == {compose_nets.NET_ENV: "172.29.213", compose_nets.EGRESS_NET_ENV: "172.29.214"}
    prefixes = [prefix for worker in nets for prefix in worker.values()]
    assert len(set(prefixes)) == 6  # no two networks of any two workers share a /24
    assert nets[2] == {compose_nets.NET_ENV: "172.29.217", compose_nets.EGRESS_NET_ENV: "172.29.218"}


def test_a_prefix_the_user_set_is_the_first_workers_and_the_others_move_from_it(monkeypatch) -> None:
    monkeypatch.setenv(compose_nets.NET_ENV, "10.9.40")
    monkeypatch.setenv(compose_nets.EGRESS_NET_ENV, "10.9.41")
    assert compose_nets.for_worker(0) == {compose_nets.NET_ENV: "10.9.40", compose_nets.EGRESS_NET_ENV: "10.9.41"}
    assert compose_nets.for_worker(1) == {compose_nets.NET_ENV: "10.9.42", compose_nets.EGRESS_NET_ENV: "10.9.43"}


@pytest.mark.parametrize("prefix", ["10.9.254", "10.9", "10.9.x"])
def test_a_prefix_that_cannot_move_is_named(monkeypatch, prefix: str) -> None:
    monkeypatch.setenv(compose_nets.NET_ENV, prefix)
    with pytest.raises(ValueError, match=prefix):
        compose_nets.for_worker(1)
