"""Secrets and roster for a stack that is not started by ``proctor up`` (the compose stack).

``python -m stack.deploy.provision env-file PATH`` (on the host, by scripts/compose-setup.sh)
writes the per-run secrets as 0600 env files that docker-compose reads (``env_file:``):
``PATH`` (every container) holds the Settings secrets ``proctor up`` draws (``run_secrets``),
PostgreSQL's password and the URL carrying it; beside it, one ``valkey-<user>.env`` per Valkey
ACL user (only the services of that component read it: web nodes, relay, workers; ``harness``
for the Valkey container's health check and the harness on the host), ``valkey-users.acl``
(the users with SHA-256 digests only, 0644 so the Valkey container's user can load it), ``faultproxy.env``
(the fault proxy's API credential), and for the Sentinel topology ``valkey-replica.env`` (the nodes'
replication credential) and ``valkey-sentinel.env`` (the Sentinels'). The committed compose file therefore holds no secret.

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
from stack.deploy.valkey_conf import PASSWORD_ENV
from stack.valkey_acl import LIMITER_USER, acl_lines, draw_passwords

__all__ = ["ACL_FILE", "FAULTPROXY_ENV", "compose_secrets", "env_file_text", "main", "valkey_user_env",
           "write_compose_secrets", "write_env_file", "write_roster"]

ACL_FILE = "valkey-users.acl"
FAULTPROXY_ENV = "faultproxy.env"
VALKEY_ENV_USERS = ("web", "relay", "worker", "harness")
"""Users whose credential a compose service (or the harness) holds; the limiter's rides with web."""

SENTINEL_ENV_FILES = {"valkey-replica.env": ("replica",), "valkey-sentinel.env": ("sentinel", "peer", "discovery")}
"""The data nodes' replication credential, and the Sentinels' own (stack/deploy/valkey_conf.py)."""

VALKEY_HOST = "valkey:6380"
POSTGRES_HOST = "postgres:5432"
POSTGRES_USER = "proctor"
POSTGRES_DB = "proctor"


def compose_secrets() -> dict[str, str]:
    """Environment every compose service reads: fresh 256-bit values for one deployment. Valkey's
    URL holds no credential: each component's own comes from its ``valkey-<user>.env``."""
    settings_secrets = run_secrets()
    pg_password = secrets.token_urlsafe(32)  # URL-safe: it goes into the URL unquoted
    return {
        **{ENV_NAMES[name]: value for name, value in settings_secrets.items()},
        "PROCTOR_PG_PASSWORD": pg_password,
        ENV_NAMES["valkey_url"]: f"rediss://{VALKEY_HOST}/0",
        ENV_NAMES["database_url"]: f"postgresql+psycopg://{POSTGRES_USER}:{pg_password}@{POSTGRES_HOST}/{POSTGRES_DB}",
    }


def valkey_user_env(user: str, passwords: Mapping[str, str]) -> dict[str, str]:
    """The env file of the services that connect as ``user`` (web nodes also hold the limiter's)."""
    env = {ENV_NAMES["valkey_user"]: user, ENV_NAMES["valkey_password"]: passwords[user],
           # read-only questions to the Sentinels (which node is primary), used with docker-compose.sentinel.yml
           ENV_NAMES["valkey_sentinel_password"]: passwords["discovery"]}
    if user == "web":
        env[ENV_NAMES["valkey_limiter_password"]] = passwords[LIMITER_USER]
    return env


def write_compose_secrets(path: Path) -> Path:
    """``path`` (the common env file) and, beside it, the Valkey users' env files, the ACL file
    Valkey loads and the fault proxy's credential: every file 0600, all drawn fresh together."""
    passwords = draw_passwords()
    folder = path.parent
    for user in VALKEY_ENV_USERS:
        write_env_file(folder / f"valkey-{user}.env", valkey_user_env(user, passwords))
    for name, users in SENTINEL_ENV_FILES.items():  # the Sentinel topology's (docker-compose.sentinel.yml)
        write_env_file(folder / name, {PASSWORD_ENV[user]: passwords[user] for user in users})
    # Digests only, and read inside the Valkey container by its own user (a bind mount keeps the
    # host's owner): 0644 in the 0700 run folder, which no other local user can enter.
    _write_private_text(folder / ACL_FILE, "\n".join(acl_lines(passwords)) + "\n").chmod(0o644)
    write_env_file(folder / FAULTPROXY_ENV, {"FAULTPROXY_API_CREDENTIAL": f"proctor:{secrets.token_urlsafe(32)}"})
    return write_env_file(path, compose_secrets())  # last: its presence means "the set is complete"


def _write_private_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def env_file_text(values: Mapping[str, str]) -> str:
    for name, value in values.items():
        if "\n" in value or not value:
            raise ValueError(f"{name}: an env file value must be one non-empty line")
    return "".join(f"{name}={value}\n" for name, value in sorted(values.items()))


def write_env_file(path: Path, values: Mapping[str, str]) -> Path:
    """Write ``NAME=value`` lines readable by the owner only (0600 from creation)."""
    return _write_private_text(path, env_file_text(values))


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
    env_file = commands.add_parser("env-file", help="write fresh secrets to 0600 env files for docker-compose")
    env_file.add_argument("path", type=Path)
    roster = commands.add_parser("roster", help="create the ledger, enrol the roster, write DIR/roster.json")
    roster.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "env-file":
            print(f"provision: wrote secrets to {write_compose_secrets(args.path)} and beside it")
        else:
            print(f"provision: enrolled the roster, codes in {write_roster(args.directory)}")
    except (SettingsError, ValueError, OSError) as exc:
        print(f"provision: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
