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

    A component writes one counter file per process (its horses append to it), the first
    line on its first connection, so a second file of a worker is a restart: the gap from
    the predecessor's last line to the successor's first is the time it was away
    (chaos/bounds.py counts a crash restart the nemesis did not cause as an outage)."""
    folder = Path(run_dir) / STATS_DIR
    out: dict[str, list[tuple[float, float]]] = {}
    for path in sorted(folder.glob(f"*{STATS_SUFFIX}")) if folder.is_dir() else []:
        times = []
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                times.append(float(json.loads(line)["updated_at"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line being appended, or one without a time: it adds no lifetime
        if times:
            out.setdefault(path.name.split(".", 1)[0], []).append((min(times), max(times)))
    return {component: sorted(spans) for component, spans in out.items()}
