"""`proctor demo` exit codes match `proctor run` and `proctor check`: 0 valid, 1 invalid,
2 unknown or a harness error (a crash must never look like an invariant violation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import chaos.runner as scenario_module
from chaos.cli import main as cli_main
from chaos.runner import RunResult


def finished_run(tmp_path: Path, valid: Any) -> RunResult:
    (tmp_path / "scenario.json").write_text(json.dumps({"time_scale": 0.01, "ledger_counts": {}}))
    verdict = {"valid": valid, "checkers": {"answers": {"valid": valid, "counts": {}}}}
    return RunResult(tmp_path, verdict, valid, {"merit_card_latency_p50": 0.02}, 0.5, "proctor run demo --seed 1")


@pytest.mark.parametrize(("valid", "code"), [(True, 0), (False, 1), ("unknown", 2)])
def test_demo_exits_with_the_verdict(valid: Any, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_module, "run_scenario", lambda *a, **k: finished_run(tmp_path, valid))
    assert cli_main(["demo"]) == code


def test_a_harness_error_in_the_demo_exits_2_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    def stack_fails(*_args: Any, **_kwargs: Any) -> RunResult:
        raise RuntimeError("haproxy did not become ready")

    monkeypatch.setattr(scenario_module, "run_scenario", stack_fails)
    assert cli_main(["demo"]) == 2
    assert "proctor demo: harness error: RuntimeError: haproxy did not become ready" in capsys.readouterr().err
