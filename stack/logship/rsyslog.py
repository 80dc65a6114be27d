"""The shipper: rsyslog's configuration and its process (issue #26, docs/log-shipping.md).

Why rsyslog: Fluent Bit is not in Debian 12 (bookworm); rsyslog 8.2302 is, with ``imfile``
(follows each component's log file, remembering its offset in the work directory), the
disk-assisted queue (memory first, spilled to disk up to ``queue.maxDiskSpace``), ``impstats``
(its own counters, written as JSON every second) and, from ``rsyslog-relp``, ``omrelp``:
RELP acknowledges every message, so a store that dies mid-stream costs a re-send (at-least-
once, duplicates possible) instead of the silent loss of plain TCP syslog.

Two choices are objects picked once when the configuration is rendered, never flags read by
the shipper: the ``Redaction`` (``REDACT`` replaces a line that matches any sensitive rule
with a marker naming the rule, before it is queued; ``NO_REDACTION`` is a negative control)
and the ``Buffer`` (``BOUNDED``: the queue holds up to its memory size plus ``disk_bytes`` on
disk, then discards new lines at once, and impstats counts each discard; ``UNCOUNTED`` is the
negative control: the same limit reached, but no counters are kept, so drops are silent).
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BOUNDED", "Buffer", "LOG_POLICIES", "NO_REDACTION", "REDACT", "REDACTION_RULES", "Redaction", "ShipperPaths",
           "render_config", "rsyslogd_argv"]

RSYSLOGD = "/usr/sbin/rsyslogd"

REDACTION_RULES: dict[str, str] = {
    # POSIX ERE (rsyslog's re_match). A line matching any is replaced whole: a partial mask
    # can leave half a secret behind, and these lines are rare in this stack's logs.
    "access_code": "access_code|access code|accesscode",
    "bearer_token": "[Bb]earer [A-Za-z0-9._~+/=-]{8,}",
    "admin_token": "[Xx]-[Aa]dmin-[Tt]oken|admin_token",
    "session_token": "[Ss]ession[ _-]?token|\"token\" *:",
    "answer": "\"content\" *:|answer content|answer_content",
}


@dataclass(frozen=True)
class Redaction:
    name: str
    rules: tuple[tuple[str, str], ...]

    def ruleset_lines(self) -> list[str]:
        lines = ['  set $!msg = $msg;']
        for rule, pattern in self.rules:
            escaped = pattern.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'  if re_match($msg, "{escaped}") then {{ set $!msg = "[redacted by the shipper: {rule}]"; }}')
        return lines


REDACT = Redaction("redact", tuple(REDACTION_RULES.items()))
NO_REDACTION = Redaction("none", ())  # negative control: the canary check must catch it


@dataclass(frozen=True)
class Buffer:
    name: str
    memory_lines: int
    disk_bytes: int
    counted: bool

    def queue_options(self) -> str:
        return (f'queue.type="LinkedList" queue.filename="ship" queue.size="{self.memory_lines}" '
                f'queue.highWatermark="{max(1, self.memory_lines * 8 // 10)}" '
                f'queue.lowWatermark="{max(1, self.memory_lines * 2 // 10)}" '
                f'queue.maxDiskSpace="{self.disk_bytes}" queue.maxFileSize="{max(4096, self.disk_bytes // 4)}" '
                'queue.timeoutEnqueue="0" queue.saveOnShutdown="on" queue.checkpointInterval="1" '
                'action.resumeRetryCount="-1" action.resumeInterval="1"')


BOUNDED = Buffer("bounded", memory_lines=20, disk_bytes=32 * 1024, counted=True)
"""Small on purpose: a few seconds of this stack's log volume, so a short outage reaches the limit
(docs/log-shipping.md has the figures: what the buffer held against how long the outage was)."""


def uncounted(buffer: Buffer) -> Buffer:
    """Negative control: the same buffer and limit, with no counter of what it discards."""
    return Buffer("uncounted", buffer.memory_lines, buffer.disk_bytes, counted=False)


LOG_POLICIES: dict[str, tuple[Redaction, Buffer]] = {
    "redact": (REDACT, BOUNDED),
    "unredacted": (NO_REDACTION, BOUNDED),  # negative control: canaries reach the store
    "uncounted": (REDACT, uncounted(BOUNDED)),  # negative control: silent drops
}
"""A deployment's ``log_shipping`` names one; turned into these objects once, when the config is rendered."""


@dataclass(frozen=True)
class ShipperPaths:
    logs: Path  # the components' log folder: every *.log in it is shipped
    work: Path  # rsyslog's work directory: imfile offsets and the queue's disk part
    stats: Path  # impstats' JSON lines
    config: Path
    pidfile: Path

    @classmethod
    def under(cls, run_dir: Path) -> "ShipperPaths":
        base = run_dir / "shipper"
        return cls(run_dir / "logs", base / "work", base / "impstats.json", base / "rsyslog.conf", base / "rsyslogd.pid")


def render_config(paths: ShipperPaths, relp_port: int, redaction: Redaction = REDACT, buffer: Buffer = BOUNDED,
                  target: str = "127.0.0.1") -> str:
    """``target``: the store's host (127.0.0.1 embedded, its service name on compose)."""
    stats = (f'module(load="impstats" interval="1" format="json" log.syslog="off" log.file="{paths.stats}" '
             'resetCounters="off")') if buffer.counted else "# no impstats: drops are not counted (negative control)"
    return "\n".join([
        f'global(workDirectory="{paths.work}" maxMessageSize="16k")',
        'module(load="imfile" mode="inotify")',
        'module(load="omrelp")',
        stats,
        f'input(type="imfile" file="{paths.logs}/*.log" tag="proctor" addMetadata="on" ruleset="ship" '
        'reopenOnTruncate="on" freshStartTail="off")',
        'template(name="line" type="list" option.jsonf="on") {',
        '  property(outname="file" name="$!metadata!filename" format="jsonf")',
        '  property(outname="offset" name="$!metadata!fileoffset" format="jsonf")',
        '  property(outname="t" name="timegenerated" dateFormat="rfc3339" format="jsonf")',
        '  property(outname="msg" name="$!msg" format="jsonf")',
        '}',
        'ruleset(name="ship") {',
        *redaction.ruleset_lines(),
        f'  action(type="omrelp" name="to_store" target="{target}" port="{relp_port}" template="line" '
        f'timeout="2" conn.timeout="2" {buffer.queue_options()})',
        '}',
        '',
    ])


def rsyslogd_argv(paths: ShipperPaths) -> list[str]:
    """In the foreground (-n), its own config and pid file, never the system's."""
    return [RSYSLOGD, "-n", "-f", str(paths.config), "-i", str(paths.pidfile)]


def write_config(paths: ShipperPaths, relp_port: int, redaction: Redaction = REDACT, buffer: Buffer = BOUNDED,
                 target: str = "127.0.0.1") -> Path:
    paths.work.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths.config.write_text(render_config(paths, relp_port, redaction, buffer, target))
    return paths.config


def check_config(paths: ShipperPaths) -> None:
    """rsyslogd -N1: the config parses and every module loads, or CalledProcessError."""
    subprocess.run([RSYSLOGD, "-N1", "-f", str(paths.config)], check=True, capture_output=True, timeout=30)


def stop(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM (rsyslog saves its queue to disk), then SIGKILL after ``grace``; by pid only."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def read_stats(path: Path) -> list[dict]:
    """Every impstats JSON record written so far ([] when none)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        start = line.find("{")
        if start >= 0:
            try:
                records.append(json.loads(line[start:]))
            except ValueError:
                continue
    return records
