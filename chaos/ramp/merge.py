"""Merge the histories of several Locust processes into one ``history.jsonl``.

Each Locust process (local, or each worker of ``--processes N`` / master + workers) writes
``histories/history-<role>-<pid>.jsonl`` with its own indexes, process numbers and clock,
plus ``wall`` (epoch seconds) on every op. The merge is a k-way merge by ``wall`` that keeps
each file's own order (so every invoke still precedes its completion), gives each
(file, process) pair its own process number (a process never spans two files), re-indexes
densely and makes ``time`` seconds since the earliest op. The checkers then read one
history, as they do for the chaos workload.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

from chaos.history import HistoryFormatError, Op, read_history, write_history

__all__ = ["HISTORIES_DIR", "STREAMS_FILE", "MergedHistory", "merge_histories", "stream_problems"]

HISTORIES_DIR = "histories"
STREAMS_FILE = "streams.json"
"""The master's record of each remote worker's history stream (loadtests/ramp_wire.py)."""


@dataclass
class MergedHistory:
    ops: int = 0
    files: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Why the merged history is not whole (a torn or unreadable process file); [] when it is."""


def _wall(op: Op) -> float:
    wall = op.extra.get("wall")
    if not isinstance(wall, (int, float)):
        raise HistoryFormatError(f"op {op.index} has no numeric 'wall': a Locust history must carry it")
    return float(wall)


def _tagged(ops: list[Op], file_number: int) -> Iterator[tuple[float, int, Op]]:
    for op in ops:
        yield _wall(op), file_number, op


def merge_histories(run_dir: Path, dest_name: str = "history.jsonl") -> MergedHistory:
    """Write ``run_dir/dest_name`` from ``run_dir/histories/*.jsonl``; report what could not be read."""
    result = MergedHistory()
    streams = []
    for number, path in enumerate(sorted((run_dir / HISTORIES_DIR).glob("*.jsonl"))):
        result.files.append(path.name)
        try:
            read = read_history(path)
        except (OSError, HistoryFormatError) as exc:
            result.problems.append(f"{path.name}: {exc}")
            continue
        if read.torn is not None:
            result.problems.append(f"{path.name}: {read.torn.describe()}")
        streams.append(list(_tagged(read.ops, number)))
    if not result.files:
        result.problems.append(f"no process history in {run_dir / HISTORIES_DIR}: the load never ran")
    result.problems += stream_problems(run_dir / HISTORIES_DIR)
    merged = list(heapq.merge(*streams, key=lambda item: item[0]))
    origin = merged[0][0] if merged else 0.0
    processes: dict[tuple[int, object], int] = {}

    def rewritten(index: int, wall: float, number: int, op: Op) -> Op:
        process = op.process if not op.is_client else processes.setdefault((number, op.process), len(processes))
        return replace(op, index=index, time=round(wall - origin, 6), process=process,
                       extra={**op.extra, "source": result.files[number]})

    result.ops = write_history(run_dir / dest_name, (rewritten(index, *item) for index, item in enumerate(merged)))
    return result


def stream_problems(folder: Path) -> list[str]:
    """Why a distributed run's streamed histories are not whole, per worker: an end of history
    never received (the worker died or was cut off), a batch missing, or what arrived differing
    from what the worker said it sent. [] when there was no stream (a local run) or all is whole."""
    path = folder / STREAMS_FILE
    if not path.exists():
        return []
    try:
        manifest = json.loads(path.read_text())
    except ValueError as exc:
        return [f"{STREAMS_FILE}: unreadable ({exc})"]
    workers = manifest.get("workers", [])
    problems = []
    if len(workers) < int(manifest.get("expected", 0)):
        problems.append(f"{len(workers)} of {manifest['expected']} expected workers were accepted: "
                        "the plan's load was not all offered")
    for w in workers:
        problems += _worker_problems(w)
    return problems


def _worker_problems(w: dict) -> list[str]:
    name = f"worker{w['worker']} (pid {w['pid']} on {w['host']}, {w['file']})"
    received, end = w["received"], w.get("end")
    if end is None:
        return [f"{name}: no end of history: the worker died or lost the master mid-run; received "
                f"{received['lines']} ops in {received['batches']} batches, the rest (its later and in-flight "
                "requests) is missing"]
    problems = []
    if end.get("in_flight_left"):
        problems.append(f"{name}: {end['in_flight_left']} requests still in flight when it ended: their completions "
                        "are missing")
    if w.get("gaps"):
        problems.append(f"{name}: batches missing or out of order at {w['gaps'][:10]}")
    if end.get("lines") != received["lines"] or end.get("batches") != received["batches"]:
        problems.append(f"{name}: sent {end.get('lines')} ops in {end.get('batches')} batches, received "
                        f"{received['lines']} in {received['batches']}")
    if (end.get("counts") or {}) != received["counts"]:
        problems.append(f"{name}: ops per call and type differ: sent {end.get('counts')}, received "
                        f"{received['counts']}")
    return problems
