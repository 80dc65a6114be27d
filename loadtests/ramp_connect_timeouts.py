"""The seed's 2,854 connection timeouts, under the Locust ramp (issue #25 item 4).

    .venv/bin/python loadtests/ramp_connect_timeouts.py [--steps 25,50,100] [--step-seconds 10]
        [--warmup 5] [--delay-ms 450] [--jitter-ms 250] [--connect-timeout 0.5] [--run-dir DIR]

What it runs, every process on 127.0.0.1, each stopped by its pid:

1. ``proctor up --link valkey_web``: the web nodes reach Valkey through the fault proxy; every
   component's connect timeout is ``--connect-timeout``; ``web_1`` opens a fresh TLS connection
   per call (``PROCTOR_VALKEY_FRESH_CONNECTIONS``), ``web_2`` pools, behind the same link.
2. ``locust -f loadtests/exam_ramp.py --headless --ramp-stack-dir`` against it (the README's ramp,
   shorter steps by default).
3. ``--warmup`` seconds into the ramp (a production pool is warm long before a load test), a
   ``slow_open`` toxic on the link's upstream, through the fault proxy's Toxiproxy API: each new
   connection's first bytes wait ``delay +- jitter`` ms (docs/faultproxy.md), so a pool pays it
   once per connection it opens, a connection per call on every call. It is removed when the
   last step ends.

Then it reads what each component counted (stack/connection_stats.py) and judges the issue's rule
with the connections checker's own function: ``web_2`` at most one timeout per connection it opened,
``web_1`` at least 10 x max(1, web_2's). It prints the table beside the seed's 2,854 and writes it
to ``DIR/timeouts.md``. Exit 0: the rule held; 1: it did not; 2: it could not be judged (the ramp or
the stack failed). The ramp's own verdict and gate are in ``DIR/ramp/ramp.md``. Not part of the test
suite (a ramp takes minutes): docs/valkey.md notes what it measured.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "loadtests")]

from chaos.checkers.connections import SEED_CONNECTION_TIMEOUTS, timeout_rule  # noqa: E402
from chaos.observe.valkey_stats import read_process_counters  # noqa: E402
from ramp_student import students_needed  # noqa: E402
from stack.cli_args import CliParser, csv_positive_floats, non_negative_int, positive_float, positive_int  # noqa: E402
from stack.paths import new_run_dir  # noqa: E402

LINK = "valkey_web"
FRESH, POOLED = "web_1", "web_2"
TOXIC = "slow_handshake"
RATIO = 10.0
QUESTIONS = 20  # exam_ramp.py's default --ramp-questions
_POLL = 0.2


def _parser() -> CliParser:
    p = CliParser(prog="ramp_connect_timeouts", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=csv_positive_floats, default=(25.0, 50.0, 100.0), help="offered req/s per step")
    p.add_argument("--step-seconds", type=positive_float, default=10.0, help="seconds per step")
    p.add_argument("--warmup", type=positive_float, default=5.0, help="seconds of ramp before the toxic")
    p.add_argument("--delay-ms", type=positive_int, default=450, help="slow_open delay (ms)")
    p.add_argument("--jitter-ms", type=non_negative_int, default=250, help="slow_open jitter (ms)")
    p.add_argument("--connect-timeout", type=positive_float, default=0.5,
                   help="every component's PROCTOR_VALKEY_CONNECT_TIMEOUT (real seconds)")
    p.add_argument("--run-dir", type=Path, default=None, help="default results/runs/<UTC>-ramp-timeouts")
    return p


def stack_argv(stack_dir: Path, connect_timeout: float) -> list[str]:
    return [sys.executable, "-m", "chaos.cli", "up", "--foreground", "--run-dir", str(stack_dir),
            "--name", "ramp-timeouts", "--origin", "harness", "--link", LINK,
            "--set", f"PROCTOR_VALKEY_CONNECT_TIMEOUT={connect_timeout:g}",
            "--set", f"{FRESH}:PROCTOR_VALKEY_FRESH_CONNECTIONS=on"]


def locust_argv(args: argparse.Namespace, stack_dir: Path, ramp_dir: Path) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "exam_ramp.py"), "--headless",
            "--only-summary", "--ramp-stack-dir", str(stack_dir), "--ramp-run-dir", str(ramp_dir),
            "--ramp-steps", ",".join(f"{s:g}" for s in args.steps), "--ramp-step-seconds", f"{args.step_seconds:g}"]


def toxic(args: argparse.Namespace) -> dict[str, Any]:
    return {"name": TOXIC, "type": "slow_open", "stream": "upstream", "toxicity": 1.0,
            "attributes": {"delay": args.delay_ms, "jitter": args.jitter_ms}}


def _api(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> None:
    """One call of the fault proxy's Toxiproxy API; its credential rides in the URL (0600 manifest)."""
    parts = urlsplit(url)
    request = urllib.request.Request(f"http://{parts.hostname}:{parts.port}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    if parts.username:
        token = base64.b64encode(f"{parts.username}:{parts.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"ramp_connect_timeouts: the fault proxy refused {method} {path}: {exc.code} "
                         f"{exc.read().decode(errors='replace')[:200]}") from None


def _stack_env(args: argparse.Namespace) -> dict[str, str]:
    """Enough students for the plan, twice over, as the ramp's own stack enrols (loadtests/ramp_stack.py)."""
    needed = students_needed(sum(rate * args.step_seconds for rate in args.steps), QUESTIONS)
    return {**os.environ, "PROCTOR_ROSTER_SIZE": str(2 * needed)}


def _wait_ready(stack: subprocess.Popen[bytes], stack_dir: Path, timeout: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.poll() is not None:
            raise SystemExit(f"ramp_connect_timeouts: the stack exited ({stack.returncode}); {stack_dir}/logs")
        try:
            manifest = json.loads((stack_dir / "manifest.json").read_text())
        except (OSError, ValueError):
            manifest = {}
        if manifest.get("status") == "ready":
            return manifest
        time.sleep(_POLL)
    raise SystemExit(f"ramp_connect_timeouts: the stack was not ready after {timeout:g} s; {stack_dir}/logs")


def _wait_ramp_start(ramp: subprocess.Popen[bytes], ramp_dir: Path) -> float | None:
    """When the ramp's first tick was written (the load has started), or None if Locust ended first."""
    while ramp.poll() is None:
        if (ramp_dir / "ramp_ticks.jsonl").exists():
            return time.monotonic()
        time.sleep(_POLL)
    return None


def _sleep_while(ramp: subprocess.Popen[bytes], until: float) -> None:
    while ramp.poll() is None and time.monotonic() < until:
        time.sleep(_POLL)


def drive(args: argparse.Namespace, faultproxy: str, ramp: subprocess.Popen[bytes], ramp_dir: Path) -> dict[str, Any]:
    """The toxic from ``warmup`` into the ramp to the end of its last step; its times, measured."""
    started = _wait_ramp_start(ramp, ramp_dir)
    if started is None:
        return {"applied": False}
    load_seconds = len(args.steps) * args.step_seconds
    _sleep_while(ramp, started + args.warmup)
    _api(faultproxy, "POST", f"/proxies/{LINK}/toxics", toxic(args))
    on = time.monotonic()
    _sleep_while(ramp, started + load_seconds)
    _api(faultproxy, "DELETE", f"/proxies/{LINK}/toxics/{TOXIC}")
    return {"applied": True, "from_seconds": round(on - started, 2),
            "to_seconds": round(time.monotonic() - started, 2), "load_seconds": load_seconds}


def judge(counted: dict[str, dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """The connections checker's rule on the stack's own counters: (exit code, its figures)."""
    violations, groups, unknown = timeout_rule((FRESH,), (POOLED,), RATIO, counted)
    if unknown:
        return 2, {"unknown": unknown}
    return (1 if any(violations.values()) else 0), {**groups, "violations": violations}


def render(figures: dict[str, Any], counted: dict[str, dict[str, Any]], window: dict[str, Any]) -> str:
    lines = ["# Valkey connection timeouts under the Locust ramp", "",
             f"`slow_open` on `{LINK}` (upstream): {json.dumps(window)}", "",
             "| component | policy | connects | timeouts | by phase |", "|---|---|---|---|---|"]
    for name, policy in ((FRESH, "fresh"), (POOLED, "pooled")):
        c = counted.get(name, {})
        lines.append(f"| {name} | {policy} | {c.get('connects', '-')} | {c.get('timeout_total', '-')} | "
                     f"{json.dumps(c.get('timeouts', {}))} |")
    lines.append(f"| the seed's load test (seed figure, not measured here) | fresh | - | {SEED_CONNECTION_TIMEOUTS:,} | - |")
    rule = figures.get("derivation") or f"unknown: {figures.get('unknown')}"
    lines += ["", f"Rule: {rule}; {POOLED} at most one timeout per connection it opened.", ""]
    return "\n".join(lines)


def _stop(process: subprocess.Popen[bytes] | None, timeout: float = 60.0) -> None:
    """SIGTERM the process's own group (it leads a session of its own), SIGKILL after ``timeout``."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    run_dir = (args.run_dir or new_run_dir("ramp-timeouts")).resolve()
    stack_dir, ramp_dir = run_dir / "stack", run_dir / "ramp"
    run_dir.mkdir(parents=True, exist_ok=True)
    stack = ramp = None
    try:
        with open(run_dir / "stack.log", "ab") as log:
            stack = subprocess.Popen(stack_argv(stack_dir, args.connect_timeout), cwd=ROOT, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True, env=_stack_env(args))
        manifest = _wait_ready(stack, stack_dir)
        print(f"ramp_connect_timeouts: stack ready ({stack_dir}); the ramp starts", flush=True)
        ramp = subprocess.Popen(locust_argv(args, stack_dir, ramp_dir), cwd=ROOT, start_new_session=True)
        window = drive(args, manifest["urls"]["faultproxy"], ramp, ramp_dir)
        ramp_code = ramp.wait()
    finally:
        _stop(ramp)
        _stop(stack)
    counted = read_process_counters(stack_dir)
    code, figures = judge(counted) if window.get("applied") else (2, {"unknown": ["the ramp never started"]})
    text = render(figures, counted, {**window, "ramp_exit": ramp_code})
    (run_dir / "timeouts.md").write_text(text)
    print(text)
    print(f"ramp_connect_timeouts: {['held', 'FAILED', 'UNKNOWN'][code]}; {run_dir}/timeouts.md, "
          f"the ramp's own report {ramp_dir}/ramp.md")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
