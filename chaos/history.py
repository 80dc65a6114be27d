"""The history: every operation the harness invoked and how it completed.

The history is the spine of the harness (Jepsen's design). Clients append an
``invoke`` op before a request and one completion after it: ``ok`` (it happened),
``fail`` (it definitely did not happen) or ``info`` (unknown: it may still happen).
The nemesis and the monitors write ops of named kinds (``OP_KINDS``: ``fault-start``,
``fault-end``, ``sample``, ``churn-sample``, ``valkey-sample``) through the writer's typed
methods, which also pick the process. Checkers only ever read a finished history, so
they can be re-run offline on a stored run folder.

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
    "CHURN_SAMPLE",
    "COMPLETION_TYPES",
    "DELIBERATE_DUPLICATE",
    "FAULT_END",
    "FAULT_START",
    "FaultWindow",
    "History",
    "HistoryFile",
    "HistoryFormatError",
    "NEMESIS",
    "MONITOR",
    "OP_KINDS",
    "Op",
    "SAMPLE",
    "VALKEY_SAMPLE",
    "client_ops",
    "fault_windows",
    "load_history",
    "monitor_samples",
    "pair_ops",
    "read_history",
    "TornLine",
    "write_history",
]

NEMESIS = "nemesis"
MONITOR = "monitor"
COMPLETION_TYPES = ("ok", "fail", "info")
DELIBERATE_DUPLICATE = "deliberate_duplicate"
"""Invoke-value field of a request the workload sends again on purpose (a replay), not because an
outcome was unknown: 1 for the first deliberate resend of its idempotency key, 2 for the second...
The client's retries of that resend carry the same number. The stats checker counts these as
``duplicate_sends``, apart from ``retries``."""

FAULT_START = "fault-start"
FAULT_END = "fault-end"
SAMPLE = "sample"
"""The monitor's /metrics sample: lane depths and oldest-job ages, pending outcomes, outbox lag."""
CHURN_SAMPLE = "churn-sample"
"""The fresh-connection generator's cumulative outcomes (chaos/load/churn.py)."""
VALKEY_SAMPLE = "valkey-sample"
"""Valkey's INFO and CLIENT LIST plus each component's own connection counters (chaos/observe/valkey_stats.py)."""
OP_KINDS: dict[str, str] = {
    FAULT_START: NEMESIS,
    FAULT_END: NEMESIS,
    SAMPLE: MONITOR,
    CHURN_SAMPLE: MONITOR,
    VALKEY_SAMPLE: MONITOR,
}
"""Every op kind (``f``) the harness's own processes write, with the process that writes it.
A new kind is one line here and one writer method; client ops carry the request's name."""
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
        if type(data["index"]) is not int:  # int() would quietly turn 3.7 or true into an index
            raise HistoryFormatError(f"op index {data['index']!r} is not an integer")
        if type(data["time"]) not in (int, float):
            raise HistoryFormatError(f"op time {data['time']!r} is not a number")
        known = {"index", "time", "process", "type", "f", "value", *_OPTIONAL}
        return cls(
            index=data["index"],
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
        self.origin_wall = time.time()  # the wall clock at time 0, for plots drawn from ledger timestamps
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
            self._file.write(_line(op))
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

    def record(self, f: str, value: Any) -> Op:
        """A harness op of a named kind (OP_KINDS); its process, nemesis or monitor, comes with the kind."""
        if f not in OP_KINDS:
            raise ValueError(f"op kind {f!r} is not one of {sorted(OP_KINDS)}")
        return self.append(process=OP_KINDS[f], type="info", f=f, value=value)

    def nemesis(self, f: str, value: Any = None) -> Op:
        """A fault op, e.g. f="fault-start", value={"fault_id": 1, "kind": "kill", "target": "web_1"}."""
        if OP_KINDS.get(f) != NEMESIS:
            raise ValueError(f"nemesis op kind {f!r} is not one of {FAULT_START!r}, {FAULT_END!r}")
        return self.record(f, value)

    def fault_start(self, value: dict[str, Any]) -> Op:
        """A fault was injected (or failed to be: value["error"]); value holds fault_id, kind, target, at, duration."""
        return self.record(FAULT_START, value)

    def fault_end(self, value: dict[str, Any]) -> Op:
        """A fault was undone; same fault_id as its fault-start, plus what healing it cost."""
        return self.record(FAULT_END, value)

    def sample(self, value: dict[str, Any]) -> Op:
        """A monitor sample: {"lanes": {lane: {"depth": n, "oldest_age": s}}, "pending_outcomes": n}."""
        return self.record(SAMPLE, value)

    def churn_sample(self, value: dict[str, Any]) -> Op:
        """The churn generator's outcomes so far: {"ops": n, "outcomes": {kind: n}, ...}."""
        return self.record(CHURN_SAMPLE, value)

    def valkey_sample(self, value: dict[str, Any]) -> Op:
        """Valkey's view of its clients and each component's connection counters: {"ok": bool, ...}."""
        return self.record(VALKEY_SAMPLE, value)

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
    """A history as read from disk: its ops, sorted by index, and the torn last line if any.

    ``file_order`` keeps each op with its line number as the file holds them, for the
    well-formedness rules (chaos/wellformed.py), which sorting by index would defeat."""

    ops: list[Op]
    torn: TornLine | None = None
    file_order: tuple[tuple[int, Op], ...] = field(default=(), compare=False, repr=False)


def read_history(path: str | os.PathLike[str]) -> HistoryFile:
    """Read a history file. A bad last line (a crash mid-write) is left out and reported
    in ``torn``; a bad line anywhere else raises HistoryFormatError naming the line."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    numbered: list[tuple[int, Op]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            numbered.append((number, Op.from_dict(json.loads(line))))
        except (json.JSONDecodeError, HistoryFormatError, TypeError, ValueError) as exc:
            if number < len(lines):
                raise HistoryFormatError(f"{path}:{number}: {exc}") from None
            torn = TornLine(number, len(line.encode("utf-8")), f"{type(exc).__name__}: {exc}"[:200])
            return HistoryFile(_by_index([op for _, op in numbered]), torn, tuple(numbered))
    return HistoryFile(_by_index([op for _, op in numbered]), None, tuple(numbered))


def write_history(path: str | os.PathLike[str], ops: Iterable[Op]) -> int:
    """Write ``ops`` as a whole history file (replacing it), in the writer's line format; returns how many.
    For tools that build a history from others (the ramp's merge), not for a run in progress."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # O_CREAT's mode applies only to a new file: a replaced one keeps its old mode
    with open(fd, "w", encoding="utf-8") as out:
        for op in ops:
            out.write(_line(op))
            written += 1
    return written


def _line(op: Op) -> str:
    return json.dumps(op.to_dict(), default=str, separators=(",", ":")) + "\n"


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
        if op.f == FAULT_START:
            started[key] = op
        elif op.f == FAULT_END and key in started:
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
    return [op for op in ops if op.process == MONITOR and op.f == SAMPLE and isinstance(op.value, dict)]
