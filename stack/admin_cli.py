"""``proctor scale`` and ``proctor lock``: capacity through the stack's admin API over HTTP.

Both talk only to a web node's admin listener (``urls.admin`` of a run's manifest, or
``--admin-url``), never to processes, so they work against any deployment whose nodes
have a scale executor (docs/architecture.md, "Scaling and the exam lock"). The lock is
enforced by the node, not by this client: ``--force`` only asks the node to override it,
and the node writes the override to the audit log.

    proctor scale web=1 merit=3 [--force --reason "..."] [RUN_DIR | --admin-url URL]
    proctor lock NOVA-101 --opens now --closes +2h --min-web 3 --min-worker merit=2
    proctor lock                      # show the stored windows and whether one is open
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any, Sequence

from stack.cli_args import CliParser, positive_int, usage_error
from stack.admin_client import AdminTargetError, add_target_args, resolve_target
from stack.headers import ADMIN_TOKEN_HEADER

__all__ = ["scale_main", "lock_main", "parse_assignment", "parse_when"]

POOLS = ("web", "merit", "ai", "sms")
_ASSIGNMENT = re.compile(r"^(?P<pool>[a-z]+)=(?P<n>\d+)$")
_RELATIVE = re.compile(r"^\+(?P<n>\d+(?:\.\d+)?)(?P<unit>[smh])$")
_UNIT = {"s": 1, "m": 60, "h": 3600}


def parse_assignment(text: str, pools: Sequence[str] = POOLS) -> tuple[str, int]:
    """``web=3`` -> ("web", 3); a clear error naming the argument otherwise."""
    match = _ASSIGNMENT.match(text)
    if not match or match["pool"] not in pools:
        raise argparse.ArgumentTypeError(f"{text!r}: expected POOL=N with POOL one of {', '.join(pools)}")
    return match["pool"], int(match["n"])


def parse_when(text: str, now: float | None = None) -> float:
    """``now``, ``+90m`` / ``+2h`` / ``+30s``, epoch seconds, or an ISO 8601 time with offset."""
    now = time.time() if now is None else now
    if text == "now":
        return now
    if match := _RELATIVE.match(text):
        return now + float(match["n"]) * _UNIT[match["unit"]]
    try:
        return float(text)
    except ValueError:
        pass
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected now, +N[smh], epoch seconds or ISO 8601") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give a UTC offset (e.g. 2026-11-30T09:00+00:00)")
    return moment.timestamp()


def _target_args(p: argparse.ArgumentParser) -> None:
    add_target_args(p)


def _target(args: argparse.Namespace) -> tuple[str, str]:
    try:
        target = resolve_target(args.run_dir, args.admin_url)
    except AdminTargetError as exc:
        raise SystemExit(usage_error("proctor", str(exc))) from None
    return target.url, target.token


def _call(prog: str, method: str, url: str, token: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    import httpx

    try:
        response = httpx.request(method, url, json=body, headers={ADMIN_TOKEN_HEADER: token},
                                 timeout=330.0, trust_env=False)  # the node allows its executor 300 s
    except httpx.HTTPError as exc:
        print(f"{prog}: {url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2, None
    payload = response.json() if response.content else {}
    if response.status_code != 200:
        print(f"{prog}: refused ({response.status_code}): {payload.get('detail', payload)}", file=sys.stderr)
        return 1, payload
    return 0, payload


def scale_main(argv: Sequence[str] | None = None) -> int:
    p = CliParser(prog="proctor scale", description="Resize pools through the admin API; "
                                "web nodes leave gracefully (drain, finish, SIGTERM).")
    p.add_argument("assignments", nargs="+", type=parse_assignment, metavar="POOL=N", help="web=N, merit=N, ai=N, sms=N")
    p.add_argument("--force", action="store_true", help="override an open exam's lock (written to the audit log)")
    p.add_argument("--reason", default="", help="why (stored with the audit record)")
    _target_args(p)
    args = p.parse_args(argv)
    admin, token = _target(args)
    for pool, n in args.assignments:
        body = {"pool": pool, "n": n, "force": args.force, "actor": "proctor-scale", "reason": args.reason}
        code, result = _call("proctor scale", "POST", f"{admin}/admin/scale", token, body)
        if code:
            return code
        print(_describe(result))
    return 0


def _describe(result: dict[str, Any]) -> str:
    line = f"{result['pool']}: {result['from']} -> {result['to']}"
    for drain in result.get("drains", []):
        state = "idle" if drain["idle"] else "STILL BUSY at SIGTERM"
        line += (f"\n  {drain['node']}: drained, {drain['in_flight_at_drain']} request(s) in flight, "
                 f"{state} after {drain['waited_seconds']:.2f}s")
    for override in result.get("lock_overridden", []):
        line += f"\n  lock of {override['exam_code']} overridden (audited)"
    return line


def lock_main(argv: Sequence[str] | None = None) -> int:
    p = CliParser(prog="proctor lock", description="Store an exam's window and minimum capacity, "
                                "or show the stored windows.")
    p.add_argument("exam", nargs="?", help="exam code; without it, show the windows")
    p.add_argument("--opens", type=parse_when, default=None, help="now, +N[smh], epoch or ISO 8601")
    p.add_argument("--closes", type=parse_when, default=None, help="now, +N[smh], epoch or ISO 8601")
    p.add_argument("--min-web", type=positive_int, default=1, help="web nodes the exam needs while open")
    p.add_argument("--min-worker", type=lambda t: parse_assignment(t, POOLS[1:]), action="append", default=[],
                   metavar="LANE=N", help="workers a lane needs while open (repeatable)")
    _target_args(p)
    p.add_argument("--json", action="store_true", help="print the API's answer as JSON (for scripts)")
    args = p.parse_args(argv)
    admin, token = _target(args)
    if args.exam is None:
        from stack import cli_output as output  # one output format for every admin command

        code, state = _call("proctor lock", "GET", f"{admin}/admin/lock", token)
        if not code:
            output.emit(state, args.json, output.render_lock)
        return code
    if args.opens is None or args.closes is None:
        p.error("--opens and --closes are required with an exam code")
    body = {"opens_at": args.opens, "closes_at": args.closes, "min_web": args.min_web,
            "min_workers": dict(args.min_worker)}
    code, window = _call("proctor lock", "PUT", f"{admin}/admin/exams/{args.exam}/window", token, body)
    if not code:
        print(f"{window['exam_code']}: window stored, {'OPEN' if window['open'] else 'closed'} now")
    return code
