"""`proctor`: one command, a subcommand per job. Each subcommand lives in its own module;
this file only dispatches, importing lazily so `proctor --help` stays fast."""

from __future__ import annotations

import importlib
import os
import sys

from chaos.cli.extras import missing_extra_hint

__all__ = ["main"]

SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "up": ("stack.embedded.cli", "up", "start the embedded stack (returns when ready; --foreground stays)"),
    "status": ("chaos.cli.status", "main", "every running stack's components, health and Valkey primary (--target compose)"),
    "down": ("stack.embedded.cli", "down", "stop a running stack (or --all), leaving no process behind"),
    "scale": ("stack.admin_cli", "scale_main", "resize web nodes or a lane's workers via the admin API (drains)"),
    "lock": ("stack.admin_cli", "lock_main", "store or show an exam's window and minimum capacity (the exam lock)"),
    "demo": ("chaos.cli.demo", "main", "start the stack, drive a short exam with faults, check it, report"),
    "run": ("chaos.cli.run", "main", "run one chaos scenario outside pytest, with live progress"),
    "sweep": ("chaos.sweep.command", "main", "every chaos scenario over N seeds (optionally under CPU load): a verdict table"),
    "ramp": ("chaos.ramp.command", "ramp_main", "the seed's 25->500 req/s Locust ramp (headless), gated by exit code"),
    "check": ("chaos.analyze", "check_main", "re-run the checkers offline on a stored run folder"),
    "digest": ("chaos.digest.command", "digest_main", "the exam digest from each web node's /metrics (--watch refreshes)"),
    "serve": ("chaos.browse.serve", "serve_main", "browse runs and sweeps: their report.html pages (127.0.0.1, read-only)"),
    "faultproxy": ("chaos.faultproxy.server", "main", "the Toxiproxy-compatible fault proxy server"),
    "lane": ("chaos.cli.ai_lane", "lane_main", "pause, resume or show the AI lane (admin API)"),
    "review": ("chaos.cli.ai_lane", "review_main", "list the AI lane's review queue, or replay one item once"),
    "alerts": ("chaos.cli.ai_lane", "alerts_main", "alerts raised by the lanes (credit exhausted, key revoked)"),
    "audit": ("chaos.cli.ai_lane", "audit_main", "audit billing: reservations against the provider's ledger"),
}


def _usage() -> str:
    lines = ["usage: proctor <command> [options]", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, _, help_) in SUBCOMMANDS.items()]
    lines += ["", "`proctor <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"proctor: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name, _ = SUBCOMMANDS[name]
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        return int(func(rest) or 0)
    except ModuleNotFoundError as exc:
        hint = missing_extra_hint(exc, name)
        if hint is None:
            return _unexpected(name, exc)
        print(hint, file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a command without its own interruption handling (docs/cli.md)
        print(f"proctor {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last net: one line, exit 2, never a traceback
        return _unexpected(name, exc)


DEBUG_ENV = "PROCTOR_DEBUG"


def _unexpected(name: str, exc: BaseException) -> int:
    """An error no command turned into its own line: still one line and exit 2 ("could not tell").
    It is a bug of Proctor's, so the traceback is one environment variable away."""
    if os.environ.get(DEBUG_ENV):
        raise exc
    print(f"proctor {name}: error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
