"""One admin client for every admin command: where the admin API is and its token. (The admin
listener is plain HTTP on loopback, behind its own HAProxy forward: no TLS applies to it.)

A command names its target with ``--admin-url`` (the token then comes from
``PROCTOR_ADMIN_TOKEN``) or with a run folder whose ``manifest.json`` names both; the run folder defaults to the latest run
(``<results>/runs/latest``, honouring ``PROCTOR_RESULTS_DIR``). httpx is imported only when
a request is sent, so resolving a target needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stack.headers import ADMIN_TOKEN_HEADER
from stack.paths import latest_run_dir

__all__ = ["ADMIN_TOKEN_HEADER", "TOKEN_ENV", "URL_ENV", "AdminTarget", "AdminTargetError", "add_target_args", "resolve_target"]

TOKEN_ENV = "PROCTOR_ADMIN_TOKEN"
URL_ENV = "PROCTOR_ADMIN_URL"


class AdminTargetError(ValueError):
    """No usable admin target: the message names the option or file to fix."""


@dataclass(frozen=True)
class AdminTarget:
    url: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {ADMIN_TOKEN_HEADER: self.token}

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        """One admin call (an ``httpx.Response``); never through a proxy from the environment."""
        import httpx

        return httpx.request(method, f"{self.url}{path}", json=body, headers=self.headers, timeout=timeout,
                             trust_env=False)


def add_target_args(parser: argparse.ArgumentParser, run_dir: bool = True) -> None:
    """``--admin-url`` and (unless the command takes a run folder of its own) ``--run-dir``."""
    if run_dir:
        parser.add_argument("--run-dir", type=Path, default=None,
                            help="run folder whose manifest names the admin URL and token "
                                 "(default <results>/runs/latest)")
    parser.add_argument("--admin-url", default=None,
                        help=f"a web node's admin listener (env {URL_ENV}); the token then comes from {TOKEN_ENV}")


def resolve_target(run_dir: Path | None = None, admin_url: str | None = None,
                   environ: Mapping[str, str] | None = None) -> AdminTarget:
    """An explicit URL (or ``$PROCTOR_ADMIN_URL``) with the token from the environment, else the
    run folder's manifest (default: the latest run, read now)."""
    environ = os.environ if environ is None else environ
    url = (admin_url or environ.get(URL_ENV, "")).strip()
    if url:
        token = environ.get(TOKEN_ENV, "")
        if not token:
            raise AdminTargetError(f"--admin-url needs {TOKEN_ENV} in the environment")
        return AdminTarget(url.rstrip("/"), token)
    folder = latest_run_dir(environ) if run_dir is None else Path(run_dir)
    manifest = _manifest(folder)
    try:
        admin, token = manifest["urls"]["admin"], manifest["settings"][TOKEN_ENV]
    except (KeyError, TypeError):
        raise AdminTargetError(f"{folder / 'manifest.json'} names no admin URL and token") from None
    return AdminTarget(str(admin).rstrip("/"), str(token))


def _manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "manifest.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise AdminTargetError(f"no manifest at {path}: give --admin-url, or a run folder (proctor up)") from None
    except (OSError, ValueError) as exc:
        raise AdminTargetError(f"{path}: {exc}") from None
