"""Operator commands of the AI lane (issue #11), over a node's admin API (HTTP), so they
work against any deployment:

    proctor lane pause|resume|show ai|sms [--reason TEXT]
    proctor review list | proctor review replay OPERATION_ID
    proctor alerts
    proctor audit billing

Every command finds the admin API through the one admin client (stack/admin_client.py):
``--url`` (a node's admin listener, or env ``PROCTOR_ADMIN_URL``) with ``--token`` (env
``PROCTOR_ADMIN_TOKEN``), else ``--run-dir``'s manifest, by default the latest run's. It prints a
table for people (``--json``: the API's answer, for scripts; stack/cli_output.py), and exits
0 on success, 1 when the answer is a failure (``audit billing`` found a violation), 2 on bad usage
or an unreachable API.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import httpx

from chaos.checkers.billing import check_billing
from stack import cli_output as output
from chaos.ledgers import EffectRow
from stack.cli_args import CliParser
from stack.admin_client import TOKEN_ENV, AdminTarget, AdminTargetError, resolve_target

__all__ = ["CommandError", "alerts_main", "audit_main", "lane_main", "review_main"]


class CommandError(RuntimeError):
    """Exit 2 with this message: a missing option, an unreachable API, a refused request."""


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = CliParser(prog=prog)
    parser.add_argument("--url", "--admin-url", dest="url", default=None,
                        help="a node's admin listener, e.g. http://127.0.0.1:9001 (env PROCTOR_ADMIN_URL); "
                             "default: the run folder's")
    parser.add_argument("--token", default=None, help="the admin token (env PROCTOR_ADMIN_TOKEN)")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="run folder whose manifest names the admin URL and token (default <results>/runs/latest)")
    output.add_json_flag(parser)
    return parser


def _target(args: argparse.Namespace) -> AdminTarget:
    """The one admin client's target; ``--token`` stands in for PROCTOR_ADMIN_TOKEN."""
    environ = {**os.environ, **({TOKEN_ENV: args.token} if args.token else {})}
    if args.url == "":
        raise CommandError("--url is empty: give the node's admin listener, or leave it out for the run folder's")
    try:
        return resolve_target(args.run_dir, args.url, environ)
    except AdminTargetError as exc:
        raise CommandError(str(exc)) from None


def _call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    target = _target(args)
    try:
        response = target.request(method, path, body, timeout=30)
    except httpx.HTTPError as exc:
        raise CommandError(f"admin API at {target.url} unreachable: {exc}") from None
    if response.status_code >= 400:
        raise CommandError(f"{method} {path}: {response.status_code} {response.text}")
    return response.json()


def _run(prog: str, build: Any, act: Any, argv: Sequence[str] | None) -> int:
    parser = _parser(prog)
    build(parser)
    args = parser.parse_args(argv)
    try:
        shown, ok, render = act(args)
    except CommandError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    output.emit(shown, args.json, render)
    return 0 if ok else 1


def lane_main(argv: Sequence[str] | None = None) -> int:
    def build(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("pause", "resume", "show"), help="what to do with the lane")
        parser.add_argument("lane", choices=("ai", "sms"), help="which lane")
        parser.add_argument("--reason", default="operator pause", help="why (pause only; audited)")

    def act(args: argparse.Namespace) -> tuple[Any, bool, Any]:
        if args.action == "show":
            return _call(args, "GET", f"/admin/lanes/{args.lane}"), True, output.render_lane
        body = {"reason": args.reason} if args.action == "pause" else None
        return _call(args, "POST", f"/admin/lanes/{args.lane}/{args.action}", body), True, output.render_lane

    return _run("proctor lane", build, act, argv)


def review_main(argv: Sequence[str] | None = None) -> int:
    def build(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("list", "replay"), help="list the queue, or replay one item once")
        parser.add_argument("operation_id", nargs="?", help="the item to replay (replay only)")

    def act(args: argparse.Namespace) -> tuple[Any, bool, Any]:
        if args.action == "list":
            return _call(args, "GET", "/admin/review"), True, output.render_review
        if not args.operation_id:
            raise CommandError("replay needs an OPERATION_ID (see `proctor review list`)")
        return _call(args, "POST", f"/admin/review/{args.operation_id}/replay"), True, output.render_replay

    return _run("proctor review", build, act, argv)


def alerts_main(argv: Sequence[str] | None = None) -> int:
    return _run("proctor alerts", lambda parser: None,
                lambda args: (_call(args, "GET", "/admin/alerts"), True, output.render_alerts), argv)


def audit_main(argv: Sequence[str] | None = None) -> int:
    def build(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("what", choices=("billing",), help="what to audit (billing: reservations against "
                                                               "the provider's ledger)")

    def act(args: argparse.Namespace) -> tuple[Any, bool, Any]:
        data = _call(args, "GET", "/admin/audit/billing")
        effects = [EffectRow(**effect) for effect in data["provider_effects"]]
        # Both reads, as the run's checker judges them (a node without the later read: the one).
        result = check_billing(data["reservations"], effects, data.get("reservations_after")).to_dict()
        return {"summary": data["summary"], "verdict": result}, result["valid"] is True, output.render_audit

    return _run("proctor audit", build, act, argv)
