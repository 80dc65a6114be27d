"""stack.deploy.provision: the compose stack's secrets env file and its roster."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from stack.config import SettingsError, insecure_secrets, load_settings
from stack.deploy.provision import compose_secrets, env_file_text, main, write_env_file, write_roster
from stack.ledger.engine import make_engine
from stack.ledger.roster import verify_access_code


def _read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_env_file_is_private_and_holds_fresh_secrets_the_stack_accepts(tmp_path: Path) -> None:
    path = tmp_path / "run" / "proctor.env"
    assert main(["env-file", str(path)]) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    env = _read_env(path)
    settings = load_settings(env)
    assert insecure_secrets(settings) == []  # none is a known default
    assert env["PROCTOR_VALKEY_URL"] == "rediss://valkey:6380/0"  # no credential: each component has its own
    assert f":{env['PROCTOR_PG_PASSWORD']}@postgres:5432/" in env["DATABASE_URL"]
    assert len(set(env.values())) == len(env)  # every secret drawn on its own


def test_each_valkey_user_gets_its_own_private_env_file_and_valkey_only_digests(tmp_path: Path) -> None:
    path = tmp_path / "run" / "proctor.env"
    assert main(["env-file", str(path)]) == 0
    users = {user: _read_env(path.parent / f"valkey-{user}.env") for user in ("web", "relay", "worker", "harness")}
    passwords = [env["PROCTOR_VALKEY_PASSWORD"] for env in users.values()]
    assert len(set(passwords)) == 4 and all(env["PROCTOR_VALKEY_USER"] == user for user, env in users.items())
    assert set(users["web"]) == {"PROCTOR_VALKEY_USER", "PROCTOR_VALKEY_PASSWORD", "PROCTOR_VALKEY_LIMITER_PASSWORD",
                                 "PROCTOR_VALKEY_SENTINEL_PASSWORD"}  # the Sentinels' read-only discovery user
    replica = _read_env(path.parent / "valkey-replica.env")
    sentinel = _read_env(path.parent / "valkey-sentinel.env")
    assert set(replica) == {"PROCTOR_VALKEY_REPLICA_PASSWORD"}  # the data nodes': replication only
    assert set(sentinel) == {"PROCTOR_SENTINEL_PASSWORD", "PROCTOR_SENTINEL_PEER_PASSWORD",
                             "PROCTOR_SENTINEL_DISCOVERY_PASSWORD"}
    assert sentinel["PROCTOR_SENTINEL_DISCOVERY_PASSWORD"] == users["web"]["PROCTOR_VALKEY_SENTINEL_PASSWORD"]
    assert replica["PROCTOR_VALKEY_REPLICA_PASSWORD"] not in (*passwords, *sentinel.values())
    common = path.read_text()
    acl = (path.parent / "valkey-users.acl").read_text()
    assert "user default reset off" in acl and acl.count("\nuser ") >= 5
    for secret in [*passwords, users["web"]["PROCTOR_VALKEY_LIMITER_PASSWORD"], *replica.values(), *sentinel.values()]:
        assert secret not in common and secret not in acl  # the common file and Valkey's file hold none
    assert stat.S_IMODE((path.parent / "valkey-users.acl").stat().st_mode) == 0o644  # digests, for the container's user
    for name in ("faultproxy.env", "valkey-web.env", "valkey-harness.env", "valkey-replica.env", "valkey-sentinel.env"):
        assert stat.S_IMODE((path.parent / name).stat().st_mode) == 0o600, name


def test_two_env_files_share_no_secret() -> None:
    first, second = compose_secrets(), compose_secrets()
    assert first["PROCTOR_VALKEY_URL"] == second["PROCTOR_VALKEY_URL"]  # an address, no secret in it
    assert not {v for k, v in first.items() if k != "PROCTOR_VALKEY_URL"} & set(second.values())


def test_env_file_refuses_an_empty_or_multi_line_value() -> None:
    assert env_file_text({"A": "1"}) == "A=1\n"
    with pytest.raises(ValueError, match="PROCTOR_TOKEN_SECRET"):
        env_file_text({"A": "1", "PROCTOR_TOKEN_SECRET": ""})
    with pytest.raises(ValueError, match="B"):
        env_file_text({"A": "1", "B": "x\nC=injected"})


def test_env_file_replaces_an_old_one_without_widening_it(tmp_path: Path) -> None:
    path = write_env_file(tmp_path / "proctor.env", {"A": "old"})
    write_env_file(path, {"A": "new"})
    assert path.read_text() == "A=new\n" and stat.S_IMODE(path.stat().st_mode) == 0o600


def _ledger_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.db'}", "PROCTOR_ROSTER_SIZE": "3",
            "PROCTOR_EXAMS": "NOVA-101:4,NOVA-102:2", **extra}


def test_roster_codes_go_to_the_file_and_only_their_hmacs_to_the_ledger(tmp_path: Path) -> None:
    env = _ledger_env(tmp_path, PROCTOR_ROSTER_KEY="k" * 43)
    path = write_roster(tmp_path / "roster", env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    exams = json.loads(path.read_text())["exams"]
    assert sorted(exams) == ["NOVA-101", "NOVA-102"] and len(exams["NOVA-101"]) == 3
    engine = make_engine(load_settings(env))
    with engine.connect() as conn:
        for student, code in exams["NOVA-101"].items():
            assert verify_access_code(conn, "k" * 43, "NOVA-101", student, code)
        student, code = next(iter(exams["NOVA-101"].items()))
        assert not verify_access_code(conn, "other-key", "NOVA-101", student, code)  # the key matters
    engine.dispose()
    assert code not in (tmp_path / "ledger.db").read_bytes().decode("latin-1")


def test_a_second_roster_replaces_the_codes(tmp_path: Path) -> None:
    env = _ledger_env(tmp_path, PROCTOR_ROSTER_KEY="k" * 43)
    old = json.loads(write_roster(tmp_path / "roster", env).read_text())["exams"]["NOVA-101"]
    new = json.loads(write_roster(tmp_path / "roster", env).read_text())["exams"]["NOVA-101"]
    engine = make_engine(load_settings(env))
    with engine.connect() as conn:
        student = sorted(old)[0]
        assert verify_access_code(conn, "k" * 43, "NOVA-101", student, new[student])
        assert not verify_access_code(conn, "k" * 43, "NOVA-101", student, old[student])
    engine.dispose()


def test_roster_without_a_key_is_refused_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="PROCTOR_ROSTER_KEY"):
        write_roster(tmp_path / "roster", _ledger_env(tmp_path, PROCTOR_ROSTER_KEY=""))
    assert not (tmp_path / "roster" / "roster.json").exists()
