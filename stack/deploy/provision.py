"""Secrets and roster for a stack that is not started by ``proctor up`` (the compose stack).

``python -m stack.deploy.provision env-file PATH`` (on the host, by scripts/compose-setup.sh)
writes the per-run secrets as a 0600 env file that docker-compose reads (``env_file:``):
the same three Settings secrets ``proctor up`` draws (``run_secrets``), plus the passwords
of Valkey and PostgreSQL, and the two URLs that carry them. The committed compose file
therefore holds no secret.

``python -m stack.deploy.provision roster DIR`` (in the one-shot ``ledger-init`` container)
creates the ledger (``init_ledger``), enrols ``PROCTOR_ROSTER_SIZE`` students per exam with
fresh access codes (``issue_roster``: only their HMACs reach the ledger) and writes the codes
to ``DIR/roster.json`` (0600), the file the harness logs students in with.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import Mapping

from stack.config import ENV_NAMES, SettingsError, load_settings
from stack.deploy.secrets import ROSTER_NAME, roster_student_ids, run_secrets, write_private_json

__all__ = ["compose_secrets", "env_file_text", "main", "write_env_file", "write_roster"]

VALKEY_HOST = "valkey:6380"
POSTGRES_HOST = "postgres:5432"
POSTGRES_USER = "proctor"
POSTGRES_DB = "proctor"


def compose_secrets() -> dict[str, str]:
    """Environment of the compose stack's secrets: fresh 256-bit values for one deployment."""
    settings_secrets = run_secrets()
    valkey_password = secrets.token_urlsafe(32)  # URL-safe: it goes into the URLs unquoted
    pg_password = secrets.token_urlsafe(32)
    return {
        **{ENV_NAMES[name]: value for name, value in settings_secrets.items()},
        "PROCTOR_VALKEY_PASSWORD": valkey_password,
        "PROCTOR_PG_PASSWORD": pg_password,
        ENV_NAMES["valkey_url"]: f"rediss://:{valkey_password}@{VALKEY_HOST}/0",
        ENV_NAMES["database_url"]: f"postgresql+psycopg://{POSTGRES_USER}:{pg_password}@{POSTGRES_HOST}/{POSTGRES_DB}",
    }


def env_file_text(values: Mapping[str, str]) -> str:
    for name, value in values.items():
        if "\n" in value or not value:
            raise ValueError(f"{name}: an env file value must be one non-empty line")
    return "".join(f"{name}={value}\n" for name, value in sorted(values.items()))


def write_env_file(path: Path, values: Mapping[str, str]) -> Path:
    """Write ``NAME=value`` lines readable by the owner only (0600 from creation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(env_file_text(values))
    os.replace(tmp, path)
    return path


def write_roster(directory: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Create the ledger and enrol the roster from the environment's settings; the codes go to
    ``directory/roster.json`` (0600). Every call issues fresh codes (the old ones stop working)."""
    from stack.ledger.engine import init_ledger, make_engine
    from stack.ledger.roster import issue_roster

    settings = load_settings(environ)
    if not settings.roster_key:
        raise SettingsError(f"{ENV_NAMES['roster_key']} is empty: the roster's HMAC key must be set")
    engine = make_engine(settings)
    try:
        init_ledger(engine, settings)
        ids = roster_student_ids(settings.roster_size)
        exams = {code: issue_roster(engine, settings.roster_key, code, ids) for code in settings.exams}
    finally:
        engine.dispose()
    directory.mkdir(parents=True, exist_ok=True)
    return write_private_json(directory / ROSTER_NAME, {"exams": exams})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.deploy.provision", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    env_file = commands.add_parser("env-file", help="write fresh secrets to a 0600 env file for docker-compose")
    env_file.add_argument("path", type=Path)
    roster = commands.add_parser("roster", help="create the ledger, enrol the roster, write DIR/roster.json")
    roster.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "env-file":
            print(f"provision: wrote secrets to {write_env_file(args.path, compose_secrets())}")
        else:
            print(f"provision: enrolled the roster, codes in {write_roster(args.directory)}")
    except (SettingsError, ValueError, OSError) as exc:
        print(f"provision: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
