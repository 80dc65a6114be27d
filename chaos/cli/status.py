"""`proctor status`: every running embedded stack (stack/embedded/cli.py), or with
``--target compose`` one compose project (chaos/deployment/compose_status.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from stack.cli_args import CliParser, usage_error

__all__ = ["main"]

PROG = "proctor status"
DEFAULT_PROJECT = "proctor"  # scripts/compose-setup.sh's, unless PROCTOR_COMPOSE_PROJECT says otherwise


def _parser() -> CliParser:
    p = CliParser(prog=PROG, description="Components, health and the Valkey primary of a running stack.")
    p.add_argument("run_dir", nargs="?", type=Path, default=None,
                   help="embedded: a stack's run folder (default: every stack running under "
                        "$PROCTOR_RESULTS_DIR/runs, or ./results/runs)")
    p.add_argument("--target", choices=("embedded", "compose"), default="embedded",
                   help="embedded stacks (default) or a compose project")
    p.add_argument("--project", default=None,
                   help="compose: the project (default $PROCTOR_COMPOSE_PROJECT, or proctor as `make compose-up` "
                        "names it; a run kept with --keep-stack prints its own)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.target == "embedded":
        if args.project is not None:
            return usage_error(PROG, "--project names a compose project: add --target compose")
        from stack.embedded.cli import status

        return status([str(args.run_dir)] if args.run_dir is not None else [])
    if args.run_dir is not None:
        return usage_error(PROG, "a run folder names an embedded stack; a compose project is named by --project")
    return _compose(args.project or os.environ.get("PROCTOR_COMPOSE_PROJECT") or DEFAULT_PROJECT)


def _compose(project: str) -> int:
    from chaos.deployment.compose_engine import Engine, EngineError
    from chaos.deployment.compose_status import compose_status

    try:
        engine = Engine(project)
    except EngineError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    try:
        return compose_status(engine)
    finally:
        engine.close()
