"""Distributed ramp without a shared file system: what master and workers say to each other
over Locust's own channel (``register_message`` / ``send_message``), and the master's record
of each worker's history stream.

Standard library only (the locustfile imports it under gevent). The protocol:

    worker -> master  proctor_hello    {token, pid, host}           first, before anything is sent back
    master -> worker  proctor_setup    {worker, workers, host, roster, plan options}   only after a good token
    worker -> master  proctor_ready    {}
    worker -> master  proctor_history  {seq, lines}                 bounded batches (<= BATCH_LINES lines)
    master -> worker  proctor_drain    {}                           the ramp is over: finish, flush, report
    worker -> master  proctor_history_end {batches, lines, counts, generator}

A worker with a wrong token gets Locust's own ``quit`` and nothing else. Locust's channel is
clear text and unauthenticated (ZeroMQ): the token keeps a stray process from receiving the
roster's access codes, not an eavesdropper; keep the traffic on a trusted network.

The master writes ``histories/history-worker<N>-<pid>.jsonl`` as batches arrive and
``histories/streams.json``: per worker what it said it sent and what arrived.
``chaos.ramp.merge`` turns a missing end, a gap or a count that differs into a problem
(verdict unknown) naming the worker.
"""

from __future__ import annotations

import hmac
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BATCH_LINES", "STREAMS_FILE", "LineBuffer", "StreamReceiver", "partition_roster", "token_matches"]

BATCH_LINES = 200
STREAMS_FILE = "streams.json"
TOKEN_ENV = "PROCTOR_RAMP_TOKEN"


def token_matches(given: Any, expected: str) -> bool:
    return isinstance(given, str) and bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def partition_roster(students: dict[str, str], worker: int, workers: int) -> dict[str, str]:
    """Worker ``worker`` of ``workers`` simulates every ``workers``-th student: disjoint parts."""
    ordered = sorted(students.items())
    return dict(ordered[worker::workers])


class LineBuffer:
    """A worker's history lines waiting to be sent; ``take`` hands out at most one batch."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self.batches = 0
        self.lines = 0

    def write(self, line: str) -> None:
        self._lines.append(line)

    def __len__(self) -> int:
        return len(self._lines)

    def take(self, limit: int = BATCH_LINES) -> dict[str, Any] | None:
        if not self._lines:
            return None
        lines, self._lines = self._lines[:limit], self._lines[limit:]
        batch = {"seq": self.batches, "lines": lines}
        self.batches += 1
        self.lines += len(lines)
        return batch


@dataclass
class WorkerStream:
    worker: int
    client_id: str
    pid: int
    host: str
    path: Path
    batches: int = 0
    lines: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    gaps: list[int] = field(default_factory=list)
    end: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"worker": self.worker, "client_id": self.client_id, "pid": self.pid, "host": self.host,
                "file": self.path.name, "received": {"batches": self.batches, "lines": self.lines,
                                                     "counts": dict(sorted(self.counts.items()))},
                "gaps": self.gaps, "end": self.end}


class StreamReceiver:
    """The master's side: one file per authorised worker, appended in arrival order."""

    def __init__(self, run_dir: Path, expected: int) -> None:
        self.expected = expected
        self.folder = run_dir / "histories"
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.streams: dict[str, WorkerStream] = {}

    def open(self, client_id: str, worker: int, pid: Any, host: Any) -> WorkerStream:
        pid = int(pid) if isinstance(pid, int) else 0
        path = self.folder / f"history-worker{worker}-{pid}.jsonl"
        stream = WorkerStream(worker, client_id, pid, str(host)[:100], path)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        self.streams[client_id] = stream
        self.write_manifest()
        return stream

    def batch(self, client_id: str, data: Any) -> None:
        stream = self.streams.get(client_id)
        if stream is None or not isinstance(data, dict) or not isinstance(data.get("lines"), list):
            return  # not an authorised worker, or not a batch: never written
        seq = data.get("seq")
        if seq != stream.batches:
            stream.gaps.append(stream.batches)  # a batch lost or out of order: the history is not whole
        lines = [line for line in data["lines"] if isinstance(line, str)]
        with open(stream.path, "a", encoding="utf-8") as out:
            out.writelines(line if line.endswith("\n") else line + "\n" for line in lines)
        stream.batches += 1
        stream.lines += len(lines)
        for line in lines:
            _count(stream.counts, line)

    def finish(self, client_id: str, data: Any) -> None:
        stream = self.streams.get(client_id)
        if stream is None or not isinstance(data, dict):
            return
        stream.end = {k: data.get(k) for k in ("batches", "lines", "counts", "in_flight_left")}
        generator = data.get("generator")
        if isinstance(generator, dict):
            generator_path = self.folder / f"generator-worker{stream.worker}-{stream.pid}.json"
            generator_path.write_text(json.dumps({**generator, "source": stream.path.name}))
        self.write_manifest()

    def ended(self, client_id: str) -> bool:
        stream = self.streams.get(client_id)
        return stream is not None and stream.end is not None

    def write_manifest(self) -> None:
        manifest = {"expected": self.expected, "workers": [s.to_dict() for s in sorted(self.streams.values(), key=lambda s: s.worker)]}
        tmp = self.folder / f".{STREAMS_FILE}.tmp"
        tmp.write_text(json.dumps(manifest, indent=1))
        tmp.replace(self.folder / STREAMS_FILE)


def _count(counts: dict[str, int], line: str) -> None:
    try:
        op = json.loads(line)
        key = f"{op['f']} {op['type']}"
    except (ValueError, KeyError, TypeError):
        key = "(unreadable)"
    counts[key] = counts.get(key, 0) + 1
