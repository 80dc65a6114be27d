"""Where run folders go: one rule for the stack, the harness, the Locust files and benchmarks.

``PROCTOR_RESULTS_DIR`` if set, otherwise ``results/`` under the current working directory.
Run folders live in ``<results>/runs/``, benchmark outputs in ``<results>/bench/``. The working
directory, not the package location, because an installed package lives in site-packages and
a user's runs belong to the project they run Proctor from. Standard library only: the harness
imports this without the stack's dependencies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["LATEST", "RESULTS_ENV", "RUN_STAMP", "bench_dir", "latest_run_dir", "new_run_dir", "results_dir",
           "runs_dir", "update_latest_link"]

RESULTS_ENV = "PROCTOR_RESULTS_DIR"
RUN_STAMP = "%Y%m%dT%H%M%S.%fZ"
"""A run folder is ``<UTC time>-<name>``; microseconds, so runs started in one second sort apart."""
LATEST = "latest"


def results_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The results root: ``$PROCTOR_RESULTS_DIR`` or ``./results``, as an absolute path."""
    environ = os.environ if environ is None else environ
    raw = environ.get(RESULTS_ENV, "").strip()
    return (Path(raw) if raw else Path.cwd() / "results").resolve()


def runs_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where run folders (and the ``latest`` link) go."""
    return results_dir(environ) / "runs"


def bench_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where benchmarks write their JSON figures."""
    return results_dir(environ) / "bench"


def latest_run_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``<runs>/latest``: what every command that takes a run folder defaults to."""
    return runs_dir(environ) / LATEST


def new_run_dir(name: str, root: Path | None = None) -> Path:
    """A run folder ``<root>/<UTC time>-<name>`` that does not exist yet (not created);
    ``root`` defaults to runs_dir(), read at call time."""
    root = runs_dir() if root is None else root
    base = root / f"{datetime.now(timezone.utc).strftime(RUN_STAMP)}-{name}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def update_latest_link(run_dir: Path, root: Path | None = None) -> Path | None:
    """Point ``<root>/latest`` at ``run_dir`` when the run lives in ``root`` (default:
    runs_dir(), read now). Atomic: a new link is renamed over the old, so a reader never
    finds it missing or half-made."""
    root = runs_dir() if root is None else root
    run_dir = run_dir.resolve()
    if run_dir.parent != root.resolve():
        return None  # a custom run folder (a test's tmp_path) must not hijack `latest`
    link = root / LATEST
    tmp = root / f".{LATEST}-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)  # relative, so the results folder can be moved
    os.replace(tmp, link)
    return link
