"""Where the suite's wall time goes, per test file: wall seconds, and CPU seconds of pytest and
of every process it started and reaped (stacks, Locust, servers), so waiting shows as wall time
the CPU did not fill (issue #22 part 4).

Each process (one per pytest-xdist worker) writes ``results/suite-time/<worker>.tsv`` when its
session ends; the process that prints the summary merges them into
``results/suite-time.tsv`` (``suite-time-compose.tsv`` for ``--chaos-target compose``) and prints
the files that took the longest. CPU is counted when a
child is reaped, so a session-scoped stack's CPU lands on the file that ran when it stopped.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

from stack.embedded.spawn import PROCESS_POOL

SHOWN = 15


def _cpu_seconds() -> float:
    mine = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the stacks' components are the fork server's children, and it lives as long as this process
    forked = PROCESS_POOL.cpu_seconds()
    return mine.ru_utime + mine.ru_stime + reaped.ru_utime + reaped.ru_stime + forked


class SuiteTime:
    def __init__(self, folder: Path, worker: str | None) -> None:
        self.folder = folder
        self.worker = worker  # an xdist worker's name (gw0, ...); None in the controller or a plain run
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        wall, cpu = time.monotonic(), _cpu_seconds()
        yield  # setup, call and teardown, so a module's stack start and stop count for its file
        path = item.nodeid.split("::", 1)[0]
        self.wall[path] += time.monotonic() - wall
        self.cpu[path] += _cpu_seconds() - cpu

    def pytest_sessionfinish(self) -> None:
        if not self.wall:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        rows = [f"{path}\t{self.wall[path]:.2f}\t{self.cpu[path]:.2f}\n" for path in sorted(self.wall)]
        (self.folder / f"{self.worker or 'main'}.tsv").write_text("".join(rows))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.worker:
            return  # the controller prints, after every worker wrote its file
        totals = _merge(self.folder)
        if not totals:
            return
        merged = self.folder.with_suffix(".tsv")
        merged.write_text("file\twall_s\tcpu_s\n" + "".join(
            f"{path}\t{wall:.2f}\t{cpu:.2f}\n" for path, (wall, cpu) in sorted(totals.items())))
        wall_sum = sum(wall for wall, _ in totals.values())
        cpu_sum = sum(cpu for _, cpu in totals.values())
        write = terminalreporter.write_line
        terminalreporter.section("where the wall time went, per file (suite_time.py)")
        write(f"{len(totals)} files: {wall_sum:.0f} s of test wall time (summed over workers), "
              f"{cpu_sum:.0f} CPU s, {cpu_sum / wall_sum if wall_sum else 0:.2f} cores busy on average; all rows: {merged}")
        write(f"{'wall s':>8} {'CPU s':>8} {'cores':>6}  file")
        for path, (wall, cpu) in sorted(totals.items(), key=lambda row: -row[1][0])[:SHOWN]:
            write(f"{wall:8.1f} {cpu:8.1f} {cpu / wall if wall else 0:6.2f}  {path}")


def _merge(folder: Path) -> dict[str, tuple[float, float]]:
    totals: dict[str, tuple[float, float]] = {}
    for part in sorted(folder.glob("*.tsv")):
        for line in part.read_text().splitlines():
            path, wall, cpu = line.split("\t")
            old_wall, old_cpu = totals.get(path, (0.0, 0.0))
            totals[path] = (old_wall + float(wall), old_cpu + float(cpu))
    return totals


def parts_folder(results: Path, target: str | None) -> Path:
    """``results/suite-time`` for the embedded pass, ``results/suite-time-compose`` for the
    compose one: `make test` runs the compose pass after the main one, in the same results
    folder, and it must not overwrite the main pass's rows."""
    return results / ("suite-time" if target in (None, "embedded") else f"suite-time-{target}")


def register(config: pytest.Config) -> None:
    folder = parts_folder(config.rootpath / "results", config.getoption("--chaos-target", default=None))
    worker = os.environ.get("PYTEST_XDIST_WORKER") or None
    if worker is None:
        for stale in folder.glob("*.tsv"):  # a previous session's parts must not add up with this one's
            stale.unlink()
    config.pluginmanager.register(SuiteTime(folder, worker), "proctor-suite-time")
