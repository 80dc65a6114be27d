"""`proctor digest`'s other sources (chaos/digest/sources.py): the exam lock line, CPU from /proc,
and the per-lane latency line from the /metrics histogram."""

from __future__ import annotations

import os
import time

from chaos.digest.command import NodeScrape, parse_metrics, render_digest
from chaos.digest.sources import component_cpu, cpu_lines, fetch_lock, lock_line
from netsupport import free_port


def _window(code: str, is_open: bool) -> dict:
    return {"exam_code": code, "open": is_open, "opens_at": 0.0, "closes_at": time.time() + 600,
            "min_web": 2, "min_workers": {"merit": 1}}


def test_the_lock_line_names_the_open_exam_and_its_minimum() -> None:
    line = lock_line({"locked": True, "windows": [_window("OLD-1", False), _window("NOVA-101", True)]})
    assert line.startswith("exam lock: LOCKED by NOVA-101") and "min web 2" in line and "OLD-1" not in line
    assert lock_line({"locked": False, "windows": [_window("OLD-1", False)]}).startswith("exam lock: unlocked")


def test_an_unknown_lock_says_why() -> None:
    assert "no admin URL" in lock_line(None)
    reason = fetch_lock(f"http://127.0.0.1:{free_port()}", "t")  # nothing listens there
    assert isinstance(reason, str) and lock_line(reason).startswith("exam lock n/a (ConnectError")


def _own_start_ticks() -> int:
    with open(f"/proc/{os.getpid()}/stat") as fh:
        return int(fh.read().rpartition(")")[2].split()[19])


def test_cpu_counts_a_live_tree_and_never_a_reused_pid() -> None:
    manifest = {"components": {"me": {"tree": [[os.getpid(), _own_start_ticks()]]},
                               "reused": {"tree": [[os.getpid(), _own_start_ticks() + 1]]}}}
    first = component_cpu(manifest)
    assert first["reused"] is None and first["me"] is not None
    busy_until = first["me"] + 0.05
    while (second := component_cpu(manifest))["me"] < busy_until:  # burn CPU until the ticks move
        sum(range(10_000))
    lines = cpu_lines(second, first, interval=1.0)
    me = next(line for line in lines if line.startswith("me ")).split()
    reused = next(line for line in lines if line.startswith("reused ")).split()
    assert float(me[1]) >= busy_until - 0.05 and int(me[2]) >= 5  # printed to 0.1 s; >= 0.05 s in a 1 s interval
    assert reused[1:] == ["n/a", "n/a"]
    assert cpu_lines(second, None, None)[1].split()[2] == "n/a"  # the first screen has no share yet
    assert cpu_lines({}, None, None)[0].startswith("CPU per component n/a")


def test_the_latency_line_shows_the_bucket_of_the_median() -> None:
    text = "\n".join(f'proctor_lane_latency_seconds_bucket{{kind="merit",lane="merit",le="{le}"}} {n}'
                     for le, n in (("0.25", 1), ("0.5", 2), ("1", 4), ("+Inf", 4)))
    screen = render_digest([NodeScrape("http://n", samples=parse_metrics(text))])
    merit = next(line for line in screen.splitlines() if line.startswith("merit "))
    assert merit.endswith("4 done, median <= 0.5 s")
