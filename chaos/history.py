"""The history: every operation the harness invoked and how it completed.

The history is the spine of the harness (Jepsen's design). Clients append an
``invoke`` op before a request and one completion after it: ``ok`` (it happened),
``fail`` (it definitely did not happen) or ``info`` (unknown: it may still happen).
The nemesis appends ``fault-start``/``fault-end`` and the monitor appends
``sample`` ops. Checkers only ever read a finished history, so they can be re-run
offline on a stored run folder.

The file is JSON Lines, one op per line, flushed as it is written: if the
harness crashes, every op written so far is still on disk. A torn last line is
left out of the ops and reported by :func:`read_history` (line number and bytes),
so a checker can say the history is incomplete instead of judging it whole.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

__all__ = [
    "COMPLETION_TYPES",
    "FaultWindow",
    "History",
    "HistoryFile",
    "HistoryFormatError",
    "NEMESIS",
    "MONITOR",
    "Op",
    "client_ops",
    "fault_windows",
    "load_history",
    "monitor_samples",
    "pair_ops",
    "read_history",
    "TornLine",
]

NEMESIS = "nemesis"
MONITOR = "monitor"
COMPLETION_TYPES = ("ok", "fail", "info")
_OP_TYPES = ("invoke",) + COMPLETION_TYPES
_OPTIONAL = ("status", "node", "receipt_id", "latency", "error")


class HistoryFormatError(ValueError):
    """A history line is not a valid op; the message names the line."""


@dataclass(frozen=True)
class Op:
    """One history entry. ``process`` is an int for clients, "nemesis" or "monitor" otherwise."""

    index: int
    time: float
    process: int | str
    type: str
    f: str
    value: Any = None
    status: int | None = None
    node: str | None = None
    receipt_id: str | None = None
    latency: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this version does not know; kept so a re-written history loses nothing."""

    @property
    def is_client(self) -> bool:
        return self.process not in (NEMESIS, MONITOR)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of one line; unset optional fields are left out."""
        data: dict[str, Any] = {
            "index": self.index,
            "time": self.time,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
        }
        for name in _OPTIONAL:
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Op":
        missing = [k for k in ("index", "time", "process", "type", "f") if k not in data]
        if missing:
            raise HistoryFormatError(f"op is missing {', '.join(missing)}: {data!r:.200}")
        if data["type"] not in _OP_TYPES:
            raise HistoryFormatError(f"op type {data['type']!r} is not one of {_OP_TYPES}")
        known = {"index", "time", "process", "type", "f", "value", *_OPTIONAL}
        return cls(
            index=int(data["index"]),
            time=float(data["time"]),
            process=data["process"],
            type=data["type"],
            f=str(data["f"]),
            value=data.get("value"),
            **{name: data.get(name) for name in _OPTIONAL},
            extra={k: v for k, v in data.items() if k not in known},
        )


class History:
    """Append-only, thread-safe JSONL writer. Use as a context manager or call close().

    ``index`` and ``time`` are assigned here, under one lock, so indexes are dense and
    times never go backwards in file order. ``time`` is seconds since the writer was
    created, from a monotonic clock (wall-clock jumps do not reorder the history).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.monotonic,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._origin = clock()
        self._fsync = fsync
        self._lock = threading.Lock()
        self._next_index = 0
        self._type_counts: Counter[str] = Counter()
        self._processes = itertools.count()
        # Line-buffered append: each op reaches the OS as soon as it is written.
        # 0600: the history holds answer contents (evidence, private to the run's owner).
        self._file = open(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", encoding="utf-8",
                          buffering=1)

    def append(self, *, process: int | str, type: str, f: str, value: Any = None, **fields: Any) -> Op:
        """Write one op; optional fields are status, node, receipt_id, latency, error (or extra keys)."""
        if type not in _OP_TYPES:
            raise ValueError(f"op type {type!r} is not one of {_OP_TYPES}")
        known = {k: fields.pop(k) for k in _OPTIONAL if k in fields}
        with self._lock:
            if self._file.closed:
                raise ValueError(f"history {self.path} is closed")
            op = Op(
                index=self._next_index,
                time=round(self._clock() - self._origin, 6),
                process=process,
                type=type,
                f=f,
                value=value,
                extra=fields,
                **known,
            )
            self._file.write(json.dumps(op.to_dict(), default=str, separators=(",", ":")) + "\n")
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())
            self._next_index += 1
            if op.is_client:
                self._type_counts[type] += 1
        return op

    def invoke(self, process: int, f: str, value: Any = None) -> Op:
        return self.append(process=process, type="invoke", f=f, value=value)

    def complete(self, invoked: Op, type: str, value: Any = None, **fields: Any) -> Op:
        """The completion of ``invoked``: same process and f; latency defaults to the time since it."""
        if type not in COMPLETION_TYPES:
            raise ValueError(f"completion type {type!r} is not one of {COMPLETION_TYPES}")
        if "latency" not in fields:
            fields["latency"] = round(max(0.0, self._clock() - self._origin - invoked.time), 6)
        value = invoked.value if value is None else value
        return self.append(process=invoked.process, type=type, f=invoked.f, value=value, **fields)

    def nemesis(self, f: str, value: Any = None) -> Op:
        """A fault op, e.g. f="fault-start", value={"fault_id": 1, "kind": "kill", "target": "web_1"}."""
        return self.append(process=NEMESIS, type="info", f=f, value=value)

    def sample(self, value: dict[str, Any]) -> Op:
        """A monitor sample: {"lanes": {lane: {"depth": n, "oldest_age": s}}, "pending_outcomes": n}."""
        return self.append(process=MONITOR, type="info", f="sample", value=value)

    def counts(self) -> dict[str, int]:
        """Client ops written so far by type ({"invoke": n, "ok": n, ...}): for progress lines."""
        with self._lock:
            return dict(self._type_counts)

    def new_process(self) -> int:
        """A process number never handed out before by this writer (use one after an info)."""
        return next(self._processes)

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class TornLine:
    """The last line of a history file that is not a valid op (the writer died mid-line)."""

    line: int
    bytes: int
    error: str

    def describe(self) -> str:
        return f"line {self.line} is torn ({self.bytes} bytes, {self.error}): the history is incomplete"


@dataclass(frozen=True)
class HistoryFile:
    """A history as read from disk: its ops, sorted by index, and the torn last line if any."""

    ops: list[Op]
    torn: TornLine | None = None


def read_history(path: str | os.PathLike[str]) -> HistoryFile:
    """Read a history file. A bad last line (a crash mid-write) is left out and reported
    in ``torn``; a bad line anywhere else raises HistoryFormatError naming the line."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    ops: list[Op] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            ops.append(Op.from_dict(json.loads(line)))
        except (json.JSONDecodeError, HistoryFormatError, TypeError, ValueError) as exc:
            if number < len(lines):
                raise HistoryFormatError(f"{path}:{number}: {exc}") from None
            torn = TornLine(number, len(line.encode("utf-8")), f"{type(exc).__name__}: {exc}"[:200])
            return HistoryFile(_by_index(ops), torn)
    return HistoryFile(_by_index(ops))


def load_history(path: str | os.PathLike[str]) -> list[Op]:
    """The ops of a history file (see read_history; a torn last line is left out)."""
    return read_history(path).ops


def _by_index(ops: list[Op]) -> list[Op]:
    return sorted(ops, key=lambda op: op.index)


def client_ops(ops: Iterable[Op]) -> Iterator[Op]:
    return (op for op in ops if op.is_client)


def pair_ops(ops: Iterable[Op]) -> list[tuple[Op, Op | None]]:
    """Each client invoke with its completion (the next op of the same process), in invoke order.

    A process has at most one op in flight, so per-process order is enough. An invoke
    with no completion (the run ended first, or a second invoke came on the same
    process) pairs with None: like ``info``, it may or may not have happened.
    """
    open_by_process: dict[int | str, int] = {}
    pairs: list[list[Any]] = []
    for op in client_ops(ops):
        if op.type == "invoke":
            open_by_process[op.process] = len(pairs)
            pairs.append([op, None])
        elif op.process in open_by_process:
            pairs[open_by_process.pop(op.process)][1] = op
    return [(inv, done) for inv, done in pairs]


@dataclass(frozen=True)
class FaultWindow:
    """One injected fault: from its fault-start to its fault-end (end None = never healed)."""

    fault_id: Any
    kind: str
    target: str
    start: float
    end: float | None


def fault_windows(ops: Sequence[Op]) -> list[FaultWindow]:
    """Pair nemesis fault-start / fault-end ops by value["fault_id"] (else in start order)."""
    started: dict[Any, Op] = {}
    windows: list[FaultWindow] = []
    for op in ops:
        if op.process != NEMESIS or not isinstance(op.value, dict):
            continue
        key = op.value.get("fault_id", op.index)
        if op.f == "fault-start":
            started[key] = op
        elif op.f == "fault-end" and key in started:
            windows.append(_window(started.pop(key), op.time))
    windows += [_window(op, None) for op in started.values()]
    return sorted(windows, key=lambda w: w.start)


def _window(start: Op, end: float | None) -> FaultWindow:
    value = start.value if isinstance(start.value, dict) else {}
    return FaultWindow(
        fault_id=value.get("fault_id", start.index),
        kind=str(value.get("kind", "fault")),
        target=str(value.get("target", "")),
        start=start.time,
        end=end,
    )


def monitor_samples(ops: Iterable[Op]) -> list[Op]:
    return [op for op in ops if op.process == MONITOR and op.f == "sample" and isinstance(op.value, dict)]
