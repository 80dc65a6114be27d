"""``proctor up / status / down`` for the embedded stack; each returns an exit code.

``up`` without ``--foreground`` re-runs itself as a detached supervisor
(``python -m stack.embedded.cli up --foreground --run-dir D``, new session, output
in ``D/logs/supervisor.log``) and waits until ``D/manifest.json`` says ready.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from stack.components import LANES, STOP_STAGES, HealthProbe
from stack.embedded import StackError
from stack import paths
from stack.embedded.manifest import MANIFEST_NAME, read_manifest
from stack.embedded.registry import RunningStack, identities, running_stacks
from stack.embedded.watchdog import is_alive, signal_tree
from stack.cli_args import EXIT_USAGE, CliParser, non_negative_int, positive_float, positive_int, usage_error

__all__ = ["up", "status", "down", "main"]

_POLL = 0.2
DEFAULT_NAME = "stack"


def iso_time(epoch: float | None) -> str:
    """Epoch seconds as UTC ISO 8601 (the one time format of the CLI, docs/cli.md)."""
    from datetime import datetime, timezone

    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


class _Stopped(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT so that `finally` stops the stack."""

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.args[0]).name}"


# ---------------------------------------------------------------- up
def _up_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="proctor up", description="Start the embedded stack on 127.0.0.1.")
    p.add_argument("--web", type=positive_int, default=2, help="web nodes behind haproxy (default 2)")
    p.add_argument("--merit-workers", type=non_negative_int, default=2,
                   help="merit lane workers (default %(default)s: one may die without stopping the lane)")
    p.add_argument("--ai-workers", type=non_negative_int, default=1, help="AI lane workers (default %(default)s)")
    p.add_argument("--sms-workers", type=non_negative_int, default=1, help="SMS lane workers (default %(default)s)")
    p.add_argument("--time-scale", type=positive_float, default=None,
                   help="real seconds per case second (TIME_SCALE; default the stack's 0.01)")
    p.add_argument("--name", default=None,
                   help="run name, part of the run folder name (default 'stack'); naming a stack lets it run "
                        "beside another")
    p.add_argument("--run-dir", type=Path, default=None, help="default: $PROCTOR_RESULTS_DIR/runs/<UTC timestamp>-<name>/ (or ./results/runs/...)")
    p.add_argument("--components", type=Path, default=None,
                   help="JSON file {kind: [argv template]} overriding component commands (tests)")
    p.add_argument("--link", action="append", default=[], metavar="NAME",
                   help="put a link behind the fault proxy (repeatable): valkey_web, valkey_workers, valkey_relay, "
                        "ai_provider, sms_gateway, web_N, web_*; with --valkey sentinel valkey_node_1, valkey_node_2")
    p.add_argument("--set", action="append", default=[], type=_assignment, metavar="[COMPONENT:]VARIABLE=VALUE",
                   dest="settings",
                   help="a setting for every component, or for one (repeatable), e.g. PROCTOR_VALKEY_CONNECT_TIMEOUT=0.5 "
                        "or web_1:PROCTOR_VALKEY_FRESH_CONNECTIONS=on (docs/architecture.md, \"Settings\", lists them)")
    p.add_argument("--valkey", choices=("single", "sentinel"), default="single",
                   help="one Valkey, or primary + replica + 3 Sentinels that every client asks for the primary "
                        "(default %(default)s; docs/valkey.md)")
    p.add_argument("--ready-timeout", type=positive_float, default=60.0, help="seconds to wait for readiness")
    p.add_argument("--foreground", action="store_true", help="stay attached until Ctrl-C/SIGTERM")
    # A stack another command starts for itself (the ramp's): listed by `status`, but it neither blocks
    # nor is blocked by the user's own `proctor up` (stack/embedded/registry.py).
    p.add_argument("--origin", choices=("cli", "harness"), default="cli", help=argparse.SUPPRESS)
    return p


class Assignment(NamedTuple):
    text: str  # as given: the detached child gets it again
    component: str  # "" for every component
    field: str
    value: Any


def _assignment(text: str) -> Assignment:
    """``[COMPONENT:]VARIABLE=VALUE``; the variable's own parser checks the value, so a bad one is
    refused before anything starts."""
    from stack.config import Controls, Settings
    from stack.settings_schema import SettingsError, declared

    target, equals, raw = text.partition("=")
    component, _, variable = target.rpartition(":")
    known = {item.env: item for cls in (Settings, Controls) for item in declared(cls)}
    if not equals or variable not in known:
        hint = f"unknown variable {variable!r}" if equals else "no '='"
        raise argparse.ArgumentTypeError(f"{hint} in {text!r}: give [COMPONENT:]VARIABLE=VALUE, "
                                         "VARIABLE a PROCTOR_* setting (docs/architecture.md, \"Settings\")")
    item = known[variable]
    try:
        value = item.parse(variable, raw) if item.parse else raw
    except SettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return Assignment(text, component, item.name, value)


def _component_names(args: argparse.Namespace) -> list[str]:
    """The components a per-component setting may name: every Python process of the stack."""
    from stack.embedded.spec import PROVIDER_KINDS

    workers = [f"worker_{lane}_{i}" for lane in LANES for i in range(1, getattr(args, f"{lane}_workers") + 1)]
    return [*(f"web_{i}" for i in range(1, args.web + 1)), "relay", *workers, *PROVIDER_KINDS]


def _settings_from_args(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``--set``: the settings of every component, and each named component's own on top."""
    everyone: dict[str, Any] = {}
    own: dict[str, dict[str, Any]] = {}
    names = _component_names(args)
    for _text, component, name, value in args.settings:
        if component and component not in names:
            raise StackError(f"--set {component}:...: no component {component!r} in this stack; one of {names}")
        (own.setdefault(component, {}) if component else everyone)[name] = value
    return everyone, own


def _spec_from_args(args: argparse.Namespace) -> Any:
    from stack.embedded.stack import StackSpec

    overrides, component_settings = _settings_from_args(args)
    if args.time_scale is not None:
        overrides["time_scale"] = args.time_scale
    commands = json.loads(args.components.read_text()) if args.components else {}
    return StackSpec(name=args.name or DEFAULT_NAME, origin=args.origin, web=args.web, merit_workers=args.merit_workers, ai_workers=args.ai_workers,
                     sms_workers=args.sms_workers, settings_overrides=overrides, run_dir=args.run_dir,
                     commands=commands, ready_timeout=min(args.ready_timeout, 30.0), links=tuple(args.link),
                     valkey=args.valkey, component_settings=component_settings)


def _print_ready(manifest: dict[str, Any]) -> None:
    print(f"stack ready in {manifest.get('startup_seconds') or 0:.1f}s: {manifest['run_dir']}")
    for key, url in manifest["urls"].items():
        print(f"  {key:<16} {url}")
    print(f"  logs             {manifest['run_dir']}/logs/")
    print(f"  stop with        proctor down {manifest['run_dir']}")


def _raise_stopped(signum: int, _frame: object) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the stop
    raise _Stopped(signum)


def _up_foreground(args: argparse.Namespace) -> int:
    from stack.embedded.stack import EmbeddedStack

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _raise_stopped)
    stack = EmbeddedStack(_spec_from_args(args))
    ready = False
    try:
        stack.start()
        ready = True
        _print_ready(read_manifest(stack.run_dir))
        sys.stdout.flush()
        while True:
            time.sleep(3600)
    except _Stopped as stop:
        print(f"{stop}{'' if ready else ' during start-up'}; stopping...", flush=True)
        return 0 if ready else 1
    except StackError as exc:
        print(f"proctor up: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()


def _child_argv(args: argparse.Namespace, run_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "stack.embedded.cli", "up", "--foreground", "--run-dir", str(run_dir),
            "--web", str(args.web), "--merit-workers", str(args.merit_workers), "--ai-workers", str(args.ai_workers),
            "--sms-workers", str(args.sms_workers), "--name", args.name or DEFAULT_NAME,
            "--ready-timeout", str(args.ready_timeout), "--origin", args.origin, "--valkey", args.valkey]
    if args.time_scale is not None:
        argv += ["--time-scale", str(args.time_scale)]
    if args.components:
        argv += ["--components", str(args.components.resolve())]
    for link in args.link:
        argv += ["--link", link]
    for assignment in args.settings:
        argv += ["--set", assignment.text]
    return argv


def _up_detached(args: argparse.Namespace) -> int:
    from stack.embedded.supervisor import PROJECT_ROOT

    run_dir = (args.run_dir or paths.new_run_dir(args.name or DEFAULT_NAME)).resolve()
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    log_path = run_dir / "logs" / "supervisor.log"
    with open(log_path, "ab") as out:
        child = subprocess.Popen(_child_argv(args, run_dir), stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True, cwd=PROJECT_ROOT)
    deadline = time.monotonic() + args.ready_timeout
    while time.monotonic() < deadline:
        if (run_dir / MANIFEST_NAME).exists():
            manifest = read_manifest(run_dir)
            if manifest["status"] == "ready" and manifest.get("supervisor_pid") == child.pid:
                _print_ready(manifest)
                return 0
        if child.poll() is not None:
            print(f"proctor up: the supervisor exited with code {child.returncode}; log {log_path}:\n"
                  f"{_tail(log_path)}", file=sys.stderr)
            return 1
        time.sleep(_POLL)
    print(f"proctor up: not ready after {args.ready_timeout:.0f}s; stopping it. Log {log_path}:\n{_tail(log_path)}",
          file=sys.stderr)
    child.terminate()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    return 1


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _already_running(args: argparse.Namespace) -> int | None:
    """One command-line stack per results folder unless named: exit 2 naming it, else None."""
    if args.name is not None or args.run_dir is not None:
        return None
    mine = [s for s in running_stacks(paths.runs_dir()) if s.origin == "cli"]
    if not mine:
        return None
    other = mine[-1]
    print(f"proctor up: a stack is already running: {other.run_dir} (since {iso_time(other.started_at)}); "
          f"stop it with `proctor down {other.run_dir}`, or start another beside it with --name NAME",
          file=sys.stderr)
    return EXIT_USAGE


def up(argv: Sequence[str] | None = None) -> int:
    args = _up_parser().parse_args(argv)
    refused = _already_running(args)
    if refused is not None:
        return refused
    try:
        _spec_from_args(args).validate()  # a bad option is reported here, not in the detached child's log
    except (StackError, OSError, ValueError) as exc:  # a bad value: usage (2), before anything starts
        print(f"proctor up: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _up_foreground(args) if args.foreground else _up_detached(args)
    except (StackError, OSError, ValueError) as exc:
        print(f"proctor up: {exc}", file=sys.stderr)
        return 1


# ---------------------------------------------------------------- status / down
def _run_dir_arg(prog: str, argv: Sequence[str] | None, extra: bool = False) -> argparse.Namespace:
    p = CliParser(prog=prog)
    p.add_argument("run_dir", nargs="?", type=Path, default=None,
                   help="a stack's run folder (default: every stack running under $PROCTOR_RESULTS_DIR/runs, "
                        "or ./results/runs)")
    if extra:
        p.add_argument("--timeout", type=positive_float, default=30.0, help="seconds to wait before SIGKILL")
        p.add_argument("--all", action="store_true", help="stop every stack running under the results folder")
    return p.parse_args(argv)


def _ident(pid: Any, ticks: Any) -> tuple[int, int] | None:
    return (int(pid), int(ticks)) if pid and ticks else None


def _health(entry: dict[str, Any], settings: dict[str, str]) -> str:
    from dataclasses import replace

    from stack.embedded.spec import probe_health

    probe = HealthProbe.from_dict(entry.get("health"))
    if probe.kind == "valkey" and settings.get("PROCTOR_VALKEY_USER"):  # the manifest's URL holds no credential
        user, password = settings["PROCTOR_VALKEY_USER"], settings.get("PROCTOR_VALKEY_PASSWORD", "")
        if entry.get("role") == "sentinel":  # a Sentinel knows only its own users
            user, password = "discovery", settings.get("PROCTOR_VALKEY_SENTINEL_PASSWORD", "")
        probe = replace(probe, target=probe.target.replace("rediss://", f"rediss://{user}:{password}@", 1))
    result = probe_health(probe, entry.get("pid"))
    return "-" if result is None else "ok" if result else "FAIL"


def _stack_rows(stacks: Sequence[RunningStack]) -> list[str]:
    lines = [f"  {'run folder':<60} {'name':<14} {'by':<8} {'since':<26} processes"]
    lines += [f"  {str(s.run_dir):<60} {s.name:<14} {s.origin:<8} {iso_time(s.started_at):<26} {s.alive}/{s.total}"
              for s in stacks]
    return lines


def status(argv: Sequence[str] | None = None) -> int:
    args = _run_dir_arg("proctor status", argv)
    if args.run_dir is not None:
        return _status_one(args.run_dir)
    stacks = running_stacks(paths.runs_dir())
    if not stacks:
        print(f"no stack is running under {paths.runs_dir()} (start one with `proctor up`)")
        return 1
    print(f"{len(stacks)} stack(s) running under {paths.runs_dir()}:")
    print("\n".join(_stack_rows(stacks)))
    codes = []
    for stack in stacks:
        print()
        codes.append(_status_one(stack.run_dir))
    return max(codes)


def _status_one(run_dir: Path) -> int:
    try:
        manifest = read_manifest(run_dir)
    except StackError as exc:
        print(f"proctor status: {exc}", file=sys.stderr)
        return 2
    sup = _ident(manifest.get("supervisor_pid"), manifest.get("supervisor_start_ticks"))
    sup_alive = bool(sup and is_alive(sup))
    print(f"run      {manifest['run_dir']}\nstatus   {manifest['status']}\n"
          f"supervisor pid {manifest.get('supervisor_pid')} {'alive' if sup_alive else 'GONE'}")
    print(f"{'component':<18} {'pid':>7} {'alive':<6} {'health':<7} restarts")
    healthy = (sup_alive and manifest["status"] == "ready") or manifest["status"] == "detached"
    for name, entry in manifest.get("components", {}).items():
        ident = _ident(entry.get("pid"), entry.get("start_ticks"))
        alive = bool(ident and is_alive(ident))
        health = _health(entry, manifest.get("settings") or {}) if alive else "-"
        healthy = healthy and alive and health != "FAIL"
        print(f"{name:<18} {entry.get('pid') or '-':>7} {'yes' if alive else 'NO':<6} {health:<7} {entry.get('restarts', 0)}")
    primary = _primary_line(manifest)
    if primary:
        print(primary)
    return 0 if healthy else 1


def _primary_line(manifest: dict[str, Any]) -> str | None:
    """Which node the Sentinels name primary (None for one Valkey), and how many of them agree."""
    from stack.embedded.sentinel import sentinel_status
    from stack.valkey_client import primary_line, sentinel_addresses

    settings = manifest.get("settings") or {}
    if not settings.get("PROCTOR_VALKEY_SENTINELS"):
        return None
    names = {("127.0.0.1", port): name for name, port in (manifest.get("ports") or {}).items()}
    answers = [sentinel_status(port, settings.get("PROCTOR_VALKEY_CA", ""),
                               settings.get("PROCTOR_VALKEY_SENTINEL_PASSWORD", ""))
               for _host, port in sentinel_addresses(settings["PROCTOR_VALKEY_SENTINELS"])]
    return primary_line([(str(a["ip"]), int(a["port"])) if a else None for a in answers], names)


def down(argv: Sequence[str] | None = None) -> int:
    args = _run_dir_arg("proctor down", argv, extra=True)
    if args.run_dir is not None:
        if args.all:
            return usage_error("proctor down", "give a run folder or --all, not both")
        return _down_one(args.run_dir, args.timeout)
    stacks = running_stacks(paths.runs_dir())
    if not stacks:
        print(f"no stack is running under {paths.runs_dir()}: nothing to stop")
        return 0
    if len(stacks) > 1 and not args.all:
        print(f"proctor down: {len(stacks)} stacks are running; name one, or stop them all with "
              f"`proctor down --all`:", file=sys.stderr)
        print("\n".join(_stack_rows(stacks)), file=sys.stderr)
        return EXIT_USAGE
    return max(_down_one(stack.run_dir, args.timeout) for stack in stacks)


def _down_one(run_dir: Path, timeout: float) -> int:
    try:
        manifest = read_manifest(run_dir)
    except StackError as exc:
        print(f"proctor down: {exc}", file=sys.stderr)
        return 2
    idents = identities(manifest)
    watchdog = _ident(manifest.get("watchdog_pid"), manifest.get("watchdog_start_ticks"))
    sup = _ident(manifest.get("supervisor_pid"), manifest.get("supervisor_start_ticks"))
    if sup and is_alive(sup):
        os.kill(sup[0], signal.SIGTERM)  # it stops its components in order, then exits
        first = {sup}
        print(f"sent SIGTERM to supervisor {sup[0]}; waiting up to {timeout:.0f}s")
        _wait_gone(first, timeout)
    else:
        print("supervisor is not running (detached or dead): stopping the components in order")
        _stop_in_stages(manifest, timeout)
    left = {i for i in idents if is_alive(i)}  # e.g. an RQ horse in its own group
    if left:
        print(f"SIGKILL to the trees of {sorted(p for p, _ in left)}")
        signal_tree(left, signal.SIGKILL)
        left = _wait_gone(left, 5.0)
    if watchdog and is_alive(watchdog):
        _wait_gone({watchdog}, 5.0)  # it exits by itself once the supervisor is gone
    if left:
        print(f"proctor down: still running: {sorted(p for p, _ in left)}", file=sys.stderr)
        return 1
    print(f"stopped: {manifest['run_dir']}")
    return 0


def _stop_in_stages(manifest: dict[str, Any], timeout: float) -> None:
    """What the supervisor would do: front first, then providers, valkey last (SIGTERM per group).

    Each entry carries its component's ``stop_stage`` (stack.components.STOP_STAGES); an entry
    without one (a manifest older than that key) stops with the front."""
    entries = list(manifest.get("components", {}).values())
    for stage in sorted(set(STOP_STAGES.values()) | {0}):
        chosen = [e for e in entries if int(e.get("stop_stage") or 0) == stage]
        mains = {i for i in (_ident(e.get("pid"), e.get("start_ticks")) for e in chosen) if i and is_alive(i)}
        for pid, _ in mains:  # each main process leads its own group
            os.killpg(pid, signal.SIGTERM)
        _wait_gone(mains, timeout / 3)


def _wait_gone(idents: set[tuple[int, int]], timeout: float) -> set[tuple[int, int]]:
    deadline = time.monotonic() + timeout
    while True:
        left = {i for i in idents if is_alive(i)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_POLL)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"up": up, "status": status, "down": down}
    if not argv or argv[0] not in commands:
        print("usage: python -m stack.embedded.cli {up,status,down} [...]", file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
