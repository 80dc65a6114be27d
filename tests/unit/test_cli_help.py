"""Issue #27 item 7: every option of every subcommand has help text (`proctor CMD --help`)."""

from __future__ import annotations

import argparse

import pytest

from chaos.cli import SUBCOMMANDS, main


def _record_missing_help(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    missing: list[str] = []
    real = argparse._ActionsContainer.add_argument

    def recording(self, *args, **kwargs):
        action = real(self, *args, **kwargs)
        if not action.help and action.dest != "help":
            missing.append("/".join(action.option_strings) or action.dest)
        return action

    monkeypatch.setattr(argparse._ActionsContainer, "add_argument", recording)
    return missing


def test_the_recorder_sees_an_option_without_help(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = _record_missing_help(monkeypatch)
    parser = argparse.ArgumentParser()
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--loud", action="store_true", help="explained")
    assert missing == ["--quiet"]


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_option_has_help(command: str, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    missing = _record_missing_help(monkeypatch)
    argv = [command, "--help"]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    assert "usage:" in capsys.readouterr().out
    assert missing == [], f"proctor {command}: options without help: {missing}"
