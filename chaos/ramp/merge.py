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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

from chaos.history import HistoryFormatError, Op, read_history, write_history

__all__ = ["HISTORIES_DIR", "MergedHistory", "merge_histories"]

HISTORIES_DIR = "histories"


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
    merged = list(heapq.merge(*streams, key=lambda item: item[0]))
    origin = merged[0][0] if merged else 0.0
    processes: dict[tuple[int, object], int] = {}

    def rewritten(index: int, wall: float, number: int, op: Op) -> Op:
        process = op.process if not op.is_client else processes.setdefault((number, op.process), len(processes))
        return replace(op, index=index, time=round(wall - origin, 6), process=process,
                       extra={**op.extra, "source": result.files[number]})

    result.ops = write_history(run_dir / dest_name, (rewritten(index, *item) for index, item in enumerate(merged)))
    return result
