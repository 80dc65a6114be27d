"""Each component's processes, read from its connection counter files after the run.

Analysis code (``proctor check``) imports no stack module, so the folder's name and
suffix are copied from stack/connection_stats.py (tests/unit/test_connection_stats.py
keeps them equal).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["STATS_DIR", "STATS_SUFFIX", "process_lifetimes"]

STATS_DIR = "connections"
STATS_SUFFIX = ".jsonl"


def process_lifetimes(run_dir: Path) -> dict[str, list[tuple[float, float]]]:
    """Per component: (first, last) ``updated_at`` of each of its processes, in start order.

    A component writes one counter file per process, named by its pid, the first line when it
    starts; its forked horses append their lines under their own pids. A second process of a
    worker is a restart: the gap from the predecessor's last line to the successor's first is
    the time it was away (chaos/bounds.py counts a crash restart the nemesis did not cause as an
    outage). In a container a restarted process gets the same pid, so it appends to the same
    file: its lines carry another ``started_at`` (lines without one count as one process)."""
    folder = Path(run_dir) / STATS_DIR
    out: dict[str, list[tuple[float, float]]] = {}
    for path in sorted(folder.glob(f"*{STATS_SUFFIX}")) if folder.is_dir() else []:
        for span in _file_lifetimes(path):
            out.setdefault(path.name.split(".", 1)[0], []).append(span)
    return {component: sorted(spans) for component, spans in out.items()}


def _file_lifetimes(path: Path) -> list[tuple[float, float]]:
    """(first, last) line time per process that owned the file (its horses' lines included)."""
    owner = path.name[:-len(STATS_SUFFIX)].rsplit(".", 1)[-1]
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return []
    lives: dict[object, list[float]] = {}
    current: object = None
    for line in lines:
        try:
            data = json.loads(line)
            at = float(data["updated_at"])
        except (ValueError, KeyError, TypeError):
            continue  # a line being appended, or one without a time: it adds no lifetime
        if str(data.get("pid")) == owner:
            current = data.get("started_at")
        lives.setdefault(current, []).append(at)
    return [(min(times), max(times)) for times in lives.values()]
