"""Faults of one exclusive group never overlap (chaos/nemesis/runner.py): the web pool keeps a node serving."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from chaos.history import History
from chaos.nemesis import FaultSpec, run_schedule


class Recorder:
    kinds = frozenset({"kill"})

    def __init__(self) -> None:
        self.events: list[str] = []

    def start(self, fault: FaultSpec) -> dict[str, Any]:
        self.events.append(f"start {fault.target}")
        return {}

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        self.events.append(f"end {fault.target}")
        return {}

    def heal(self) -> None:
        pass


def _play(tmp_path: Path, exclusive: str) -> list[str]:
    # web_2's kill is due while web_1's is still on (web_1 is down 1 s from 0, web_2 due at 0.05)
    faults = [FaultSpec(at=0.0, kind="kill", target="web_1", duration=1.0, exclusive=exclusive),
              FaultSpec(at=0.05, kind="kill", target="web_2", duration=0.05, exclusive=exclusive)]
    nemesis = Recorder()
    with History(tmp_path / "history.jsonl") as history:
        asyncio.run(run_schedule(nemesis, faults, history, time.monotonic()))
    return nemesis.events


def test_a_fault_of_the_same_group_waits_for_the_one_before_to_end(tmp_path: Path) -> None:
    assert _play(tmp_path, "web pool") == ["start web_1", "end web_1", "start web_2", "end web_2"]


def test_without_a_group_faults_on_other_targets_overlap(tmp_path: Path) -> None:
    assert _play(tmp_path, "") == ["start web_1", "start web_2", "end web_2", "end web_1"]


def test_the_group_is_part_of_the_declared_fault() -> None:
    assert FaultSpec(at=1.0, kind="kill", target="web_1", duration=2.0, exclusive="web pool").as_dict()["exclusive"] == "web pool"
    assert "exclusive" not in FaultSpec(at=1.0, kind="kill", target="web_1", duration=2.0).as_dict()
