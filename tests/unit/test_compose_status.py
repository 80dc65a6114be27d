"""`proctor status`'s primary line and `--target compose` (chaos/deployment/compose_status.py),
against an engine in memory: a real project is exercised by hand (docs/valkey.md, "On compose")."""

from pathlib import Path

import pytest

from chaos.cli import status as status_cli
from chaos.deployment import compose_status
from stack.valkey_client import majority, primary_line

NAMES = {("172.29.13.11", 6380): "valkey", ("172.29.13.12", 6380): "valkey-2"}
OLD, NEW = ("172.29.13.11", 6380), ("172.29.13.12", 6380)


def test_the_primary_is_what_most_answering_sentinels_name() -> None:
    assert primary_line([NEW, NEW, OLD], NAMES) == "primary  valkey-2 (172.29.13.12:6380; 2 of 3 Sentinels agree)"
    assert primary_line([None, OLD, None], NAMES) == "primary  valkey (172.29.13.11:6380; 1 of 3 Sentinels agree)"
    assert primary_line([NEW, ("10.0.0.9", 6380)], {}) .startswith("primary  ? (")
    assert primary_line([None, None, None], NAMES) == "primary  unknown: no Sentinel answers"
    assert majority([None, OLD, NEW, NEW]) == NEW


class FakeEngine:
    project = "proctor"

    def __init__(self, containers: dict, files: dict | None = None) -> None:
        self.containers, self.files, self.read = containers, files or {}, []

    def services(self) -> list[str]:
        return sorted(self.containers)

    def inspect(self, service: str) -> dict:
        return self.containers[service]

    def read_file(self, service: str, path: str) -> bytes:
        self.read.append((service, path))
        return self.files[(service, path)]


def _container(status="running", health="healthy", exit_code=0, ip="", env=()) -> dict:
    state = {"Status": status, "ExitCode": exit_code, **({"Health": {"Status": health}} if health else {})}
    return {"State": state, "RestartCount": 0, "Config": {"Env": list(env)},
            "NetworkSettings": {"Networks": {"proctor_default": {"IPAddress": ip}}}}


SENTINEL_ENV = ["PROCTOR_VALKEY_SENTINELS=172.29.13.21:26379,172.29.13.22:26379,172.29.13.23:26379",
                "PROCTOR_VALKEY_SENTINEL_PASSWORD=s3cret", "PATH=/usr/bin"]


def _sentinel_project() -> FakeEngine:
    return FakeEngine({"valkey": _container(ip="172.29.13.11"), "valkey-2": _container(ip="172.29.13.12"),
                       "relay": _container(health=None, env=SENTINEL_ENV),
                       "certs": _container(status="exited", health=None)},
                      {("valkey", "/certs/ca.crt"): b"-----CA-----\n"})


def test_a_one_shot_that_exited_zero_is_done_and_a_failed_or_unhealthy_service_is_not() -> None:
    assert compose_status.service_row("certs", _container(status="exited", health=None)) == (
        "certs              exited    done       0", True)
    assert compose_status.service_row("ledger-init", _container(status="exited", health=None, exit_code=1))[1] is False
    assert compose_status.service_row("web-1", _container(health="unhealthy"))[1] is False
    assert compose_status.service_row("relay", _container(health=None))[1] is True  # no health check: running is all
    assert compose_status.service_row("web-2", _container(status="paused"))[1] is False


def test_the_sentinels_are_asked_with_the_project_clients_own_settings(monkeypatch) -> None:
    asked = []

    def votes(settings):
        asked.append((settings.valkey_sentinels, settings.valkey_sentinel_password, settings.valkey_url,
                      Path(settings.valkey_ca).read_bytes()))
        return [NEW, NEW, None]

    monkeypatch.setattr(compose_status, "sentinel_votes", votes)
    engine = _sentinel_project()
    line = compose_status.primary_of(engine)
    assert line == "primary  valkey-2 (172.29.13.12:6380; 2 of 3 Sentinels agree)"
    [(sentinels, password, url, ca)] = asked
    assert sentinels.startswith("172.29.13.21:26379") and password == "s3cret" and ca == b"-----CA-----\n"
    assert url.startswith("rediss://")  # TLS: the discovery clients verify the Sentinels' certificate
    assert engine.read == [("valkey", "/certs/ca.crt")]


def test_a_killed_primary_is_still_named_by_its_fixed_address_until_the_switch(monkeypatch) -> None:
    monkeypatch.setattr(compose_status, "sentinel_votes", lambda settings: [OLD, OLD, OLD])
    engine = _sentinel_project()
    engine.containers["valkey"] = _container(status="exited", health="unhealthy", exit_code=137)
    engine.containers["valkey"]["NetworkSettings"]["Networks"]["proctor_default"]["IPAMConfig"] = {
        "IPv4Address": "172.29.13.11"}  # what docker inspect keeps of a stopped container's address
    assert compose_status.primary_of(engine) == "primary  valkey (172.29.13.11:6380; 3 of 3 Sentinels agree)"


def test_one_valkey_prints_no_primary_line_and_asks_no_sentinel(monkeypatch) -> None:
    monkeypatch.setattr(compose_status, "sentinel_votes", lambda settings: pytest.fail("asked a Sentinel"))
    engine = FakeEngine({"valkey": _container(), "relay": _container(health=None, env=["PATH=/usr/bin"])})
    assert compose_status.primary_of(engine) is None and engine.read == []


def test_compose_status_prints_every_service_and_fails_on_an_unhealthy_one(monkeypatch, capsys) -> None:
    monkeypatch.setattr(compose_status, "sentinel_votes", lambda settings: [OLD, OLD, OLD])
    engine = _sentinel_project()
    assert compose_status.compose_status(engine) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "compose project proctor" and len(out) == 2 + 4 + 1
    assert out[-1] == "primary  valkey (172.29.13.11:6380; 3 of 3 Sentinels agree)"
    assert "s3cret" not in "\n".join(out)
    engine.containers["valkey-2"] = _container(health="unhealthy", ip="172.29.13.12")
    assert compose_status.compose_status(engine) == 1


@pytest.mark.parametrize("argv, message", [
    (["--project", "p"], "--project names a compose project: add --target compose"),
    (["--target", "compose", "results/runs/x"], "a run folder names an embedded stack"),
])
def test_a_misplaced_option_is_one_line_and_exit_2(argv, message, capsys) -> None:
    assert status_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_no_engine_or_no_project_is_one_line_and_exit_1(monkeypatch, capsys) -> None:
    from chaos.deployment import compose_engine

    def no_engine(project, client=None):
        raise compose_engine.EngineError(f"no container has the label com.docker.compose.project={project}")

    monkeypatch.setattr(compose_engine, "Engine", no_engine)
    monkeypatch.setenv("PROCTOR_COMPOSE_PROJECT", "exam7")
    assert status_cli.main(["--target", "compose"]) == 1
    assert capsys.readouterr().err == "proctor status: no container has the label com.docker.compose.project=exam7\n"
