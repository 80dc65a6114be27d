"""Pure parts of scaling: the drain loop against a scripted HAProxy, the lock arithmetic,
and the `proctor scale` / `proctor lock` argument parsers."""

from __future__ import annotations

import argparse
from typing import Iterator

import pytest

from stack import admin_cli
from stack.embedded import drain
from stack.ledger.exam_lock import ExamWindow, violations


class ScriptedHAProxy:
    """Replies ``show stat`` with the next session count for web_2 and records commands."""

    def __init__(self, sessions: list[int]) -> None:
        self.sessions: Iterator[int] = iter(sessions)
        self.last = 0
        self.commands: list[str] = []

    def drain_server(self, _sock: object, server: str) -> None:
        self.commands.append(f"drain {server}")

    def disable_server(self, _sock: object, server: str) -> None:
        self.commands.append(f"maint {server}")

    def server_sessions(self, _sock: object) -> dict[str, int]:
        self.last = next(self.sessions, self.last)
        return {"web_1": 7, "web_2": self.last}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _drain(monkeypatch: pytest.MonkeyPatch, sessions: list[int], limit: float) -> tuple[drain.DrainReport, list[str]]:
    fake, clock = ScriptedHAProxy(sessions), FakeClock()
    monkeypatch.setattr(drain, "hap", fake)
    report = drain.drain_server_idle("/sock", "web_2", limit, clock=clock, sleep=clock.sleep)
    return report, fake.commands


def test_drain_waits_until_the_node_holds_no_request_then_maintenance(monkeypatch: pytest.MonkeyPatch) -> None:
    report, commands = _drain(monkeypatch, [3, 2, 2, 1, 0], limit=30.0)
    assert commands == ["drain web_2", "maint web_2"]
    assert (report.node, report.in_flight_at_drain, report.idle, report.polls) == ("web_2", 3, True, 5)


@pytest.mark.negative_control
def test_a_request_that_never_ends_is_reported_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    report, commands = _drain(monkeypatch, [1], limit=1.0)  # web_2 keeps one request forever
    assert commands == ["drain web_2", "maint web_2"]
    assert report.idle is False and report.in_flight_at_drain == 1 and report.waited_seconds >= 1.0


def test_lock_minimums_per_pool_and_window_bounds() -> None:
    window = ExamWindow("NOVA-101", 100.0, 200.0, min_web=3, min_workers={"merit": 2})
    assert [window.is_open(t) for t in (99.9, 100.0, 199.9, 200.0)] == [False, True, True, False]
    assert [v.pool for v in violations([window], "web", 2)] == ["web"] and violations([window], "web", 3) == []
    assert violations([window], "merit", 1)[0].message.startswith("exam NOVA-101 (window 1970-01-01 00:01:40Z to ")
    assert violations([window], "ai", 0) == []  # no minimum stored for the lane


def test_cli_parsers_name_the_bad_argument() -> None:
    assert admin_cli.parse_assignment("merit=3") == ("merit", 3)
    for bad in ("gpu=1", "web=-1", "web"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad)):
            admin_cli.parse_assignment(bad)
    assert admin_cli.parse_when("+2h", now=1000.0) == 8200.0 and admin_cli.parse_when("now", now=5.0) == 5.0
    assert admin_cli.parse_when("2026-11-30T09:00:00+00:00") == 1796029200.0
    with pytest.raises(argparse.ArgumentTypeError, match="UTC offset"):
        admin_cli.parse_when("2026-11-30T09:00:00")


def test_a_scale_fault_without_restore_stays_scaled_and_logs_the_drains() -> None:
    from test_deployment import FakeDeployment

    from chaos.nemesis import FaultSpec
    from chaos.nemesis.process import ProcessNemesis

    class DrainingDeployment(FakeDeployment):
        def scale(self, pool: str, n: int) -> dict:  # type: ignore[override]
            super().scale(pool, n)
            return {"drains": [{"node": "web_3", "idle": True}]}

    fake = DrainingDeployment({"web": 3})
    nemesis = ProcessNemesis(fake)
    fault = FaultSpec(at=0, kind="scale", target="web", duration=1, params={"count": 1, "restore": False})
    assert nemesis.start(fault) == {"from": 3, "to": 1, "drains": [{"node": "web_3", "idle": True}]}
    nemesis.end(fault)
    nemesis.heal()
    assert [c.name for c in fake.table.pool("web")] == ["web_1"]  # neither end nor heal scaled back
