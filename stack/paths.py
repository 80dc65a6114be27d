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
from pathlib import Path

__all__ = ["RESULTS_ENV", "results_dir", "runs_dir", "bench_dir"]

RESULTS_ENV = "PROCTOR_RESULTS_DIR"


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
