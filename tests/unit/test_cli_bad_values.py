"""Issue #27 item 4: every subcommand answers a bad value with one line naming the option and
its rule, exit 2, and no traceback. Each case runs in-process through `proctor`'s dispatcher;
the table must cover every subcommand (a new one without a case fails here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli import SUBCOMMANDS, main

NOWHERE = "/nonexistent/proctor-run"

CASES: list[tuple[list[str], str]] = [
    (["up", "--web", "0"], "--web"),
    (["up", "--web", "abc"], "--web"),
    (["up", "--time-scale", "-1"], "--time-scale"),
    (["up", "--merit-workers", "-1"], "--merit-workers"),
    (["up", "--ready-timeout", "0"], "--ready-timeout"),
    (["up", "--name", "no spaces"], "name"),
    (["up", "--set", "PROCTOR_NO_SUCH=1"], "unknown variable 'PROCTOR_NO_SUCH'"),
    (["up", "--set", "PROCTOR_VALKEY_CONNECT_TIMEOUT=soon"], "PROCTOR_VALKEY_CONNECT_TIMEOUT='soon'"),
    (["up", "--set", "web_3:PROCTOR_VALKEY_FRESH_CONNECTIONS=on"], "no component 'web_3'"),
    (["status", "--target", "compose", NOWHERE], "a run folder names an embedded stack"),
    (["status", "--bogus"], "--bogus"),
    (["status", NOWHERE], "no manifest"),
    (["down", "--timeout", "-1"], "--timeout"),
    (["down", NOWHERE], "no manifest"),
    (["down", NOWHERE, "--all"], "--all"),
    (["scale", "web=x"], "POOL=N"),
    (["scale", "web=1", "--run-dir", NOWHERE], "no manifest"),
    (["lock", "NOVA-101", "--min-web", "0"], "--min-web"),
    (["lock", "NOVA-101", "--opens", "yesterday"], "--opens"),
    (["demo", "--time-scale", "-1"], "--time-scale"),
    (["demo", "--seed", "abc"], "--seed"),
    (["run", "no_such_scenario"], "SCENARIO"),
    (["run", "demo", "--time-scale", "0"], "--time-scale"),
    (["sweep", "--seeds", "0"], "--seeds"),
    (["sweep", "--stress", "-1"], "--stress"),
    (["ramp", "--steps", "abc"], "--steps"),
    (["ramp", "--max-failure-ratio", "2"], "--max-failure-ratio"),
    (["ramp", "--processes", "0"], "--processes"),
    (["check", NOWHERE], "does not exist"),
    (["check", "some-run", "--bogus"], "--bogus"),
    (["digest", NOWHERE], "run_dir"),
    (["digest", "--watch", "0", "--url", "http://127.0.0.1:9"], "--watch"),
    (["faultproxy", "--port", "70000"], "--port"),
    (["serve", "--port", "70000"], "--port"),
    (["serve", NOWHERE], "results"),
    (["lane", "pause", "xyz"], "lane"),
    (["review", "bogus"], "action"),
    (["alerts", "--bogus"], "--bogus"),
    (["audit", "nothing"], "what"),
]


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse exits; the console script turns it into the exit code
        return exc.code if isinstance(exc.code, int) else 1


def test_every_subcommand_has_a_bad_value_case() -> None:
    assert {argv[0] for argv, _ in CASES} == set(SUBCOMMANDS)


@pytest.mark.parametrize(("argv", "named"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_bad_value_is_one_line_and_exit_2(argv: list[str], named: str, capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_RESULTS_DIR", str(tmp_path))  # nothing of the user's is read or moved
    monkeypatch.delenv("PROCTOR_ADMIN_TOKEN", raising=False)
    code = _run(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert named in lines[0] and lines[0].startswith("proctor"), lines[0]


def test_an_unexpected_error_is_one_line_too(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import chaos.analyze

    def broken(_argv: object) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(chaos.analyze, "check_main", broken)
    monkeypatch.delenv("PROCTOR_DEBUG", raising=False)
    assert main(["check", "x"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "proctor check: error: RuntimeError: boom (set PROCTOR_DEBUG=1 for the traceback)"
