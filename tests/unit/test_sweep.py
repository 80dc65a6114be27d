"""`proctor sweep` without a stack: expectations, the verdict table, its files, exit codes, options."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import chaos.sweep.command as sweep_module
import chaos.sweep.table as table_module
from chaos.cli import main as cli_main
from chaos.sweep.command import run_sweep, sweep_seeds
from chaos.sweep.table import RunOutcome, SweepTable, cell_word, met_expectation


@dataclass
class FakeScenario:
    name: str
    expect_valid: bool = True


@dataclass
class FakeResult:
    valid: Any
    run_dir: Path
    reproduce: str = "proctor run x --seed 1"


def scripted(verdicts: dict[tuple[str, int], Any], calls: list | None = None):
    """A run_one whose verdict per (scenario, seed) is given; an exception instance is raised."""
    def run_one(scenario: FakeScenario, seed: int, run_dir: Path) -> FakeResult:
        if calls is not None:
            calls.append((scenario.name, seed, run_dir))
        verdict = verdicts[(scenario.name, seed)]
        if isinstance(verdict, BaseException):
            raise verdict
        return FakeResult(verdict, run_dir)
    return run_one


def outcome(scenario: str, seed: int, expect_valid: bool, valid: Any, error: str | None = None) -> RunOutcome:
    return RunOutcome(scenario, seed, expect_valid, valid, 1.0, f"runs/{scenario}-seed{seed}", None, error)


def test_a_positive_scenario_meets_its_expectation_only_when_valid() -> None:
    assert met_expectation(True, True) is True
    assert [met_expectation(True, v) for v in (False, "unknown", None)] == [False, False, False]


def test_a_negative_control_meets_its_expectation_only_when_caught() -> None:
    assert met_expectation(False, False) is True
    assert [met_expectation(False, v) for v in (True, "unknown", None)] == [False, False, False]


def test_cell_words_say_what_happened() -> None:
    assert [cell_word(True, v) for v in (True, False, "unknown")] == ["valid", "INVALID", "UNKNOWN"]
    assert [cell_word(False, v) for v in (False, True, "unknown")] == ["caught", "MISSED", "UNKNOWN"]
    assert cell_word(True, None, "RuntimeError: boom") == cell_word(False, False, "X: y") == "ERROR"


def test_a_harness_error_is_never_ok_even_with_a_matching_verdict() -> None:
    assert outcome("n", 1, False, False, error="RuntimeError: boom").ok is False


def table_of(outcomes: list[RunOutcome], seeds: list[int] | None = None) -> SweepTable:
    rows = list({o.scenario: o.expect_valid for o in outcomes}.items())
    return SweepTable(rows, seeds or sorted({o.seed for o in outcomes}), outcomes, stress=1, stamp="T")


def test_exit_code_is_0_only_when_every_run_met_its_expectation() -> None:
    good = [outcome("pos", 1, True, True), outcome("pos", 2, True, True),
            outcome("neg", 1, False, False), outcome("neg", 2, False, False)]
    assert table_of(good).exit_code() == 0
    cases = {  # the last run replaced by: -> expected exit code
        "positive invalid": (outcome("neg", 2, True, False), 1),
        "negative control missed": (outcome("neg", 2, False, True), 1),
        "unknown": (outcome("neg", 2, False, "unknown"), 2),
        "harness error": (outcome("neg", 2, False, None, error="OSError: x"), 2),
    }
    for name, (last, code) in cases.items():
        assert table_of(good[:-1] + [last]).exit_code() == code, name


def test_a_contradicting_verdict_outranks_unknown_and_missing_runs_are_not_a_pass() -> None:
    mixed = [outcome("pos", 1, True, "unknown"), outcome("pos", 2, True, False)]
    assert table_of(mixed).exit_code() == 1
    partial = table_of([outcome("pos", 1, True, True)], seeds=[1, 2])
    assert not partial.complete and partial.exit_code() == 2


def test_the_table_has_a_row_per_scenario_a_column_per_seed_and_the_failing_seeds() -> None:
    table = table_of([outcome("worker_kill", 7, True, True), outcome("worker_kill", 8, True, False),
                      outcome("no_reconciler", 7, False, False), outcome("no_reconciler", 8, False, "unknown")])
    lines = table.markdown().splitlines()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| ")]
    assert rows == [["scenario", "expect", "7", "8", "failing seeds"],
                    ["worker_kill", "valid", "valid", "INVALID", "8"],
                    ["no_reconciler", "caught", "caught", "UNKNOWN", "8"]]
    assert "2 of 4 runs met their expectation" in table.markdown()


def test_run_sweep_runs_scenarios_by_seeds_and_writes_markdown_json_and_junit(tmp_path: Path) -> None:
    scenarios = [FakeScenario("pos"), FakeScenario("neg", expect_valid=False)]
    verdicts = {("pos", 5): True, ("pos", 6): False, ("neg", 5): False, ("neg", 6): RuntimeError("stack died")}
    calls: list = []
    said: list[str] = []
    table = run_sweep(scenarios, [5, 6], tmp_path, scripted(verdicts, calls), said.append, stress=1)

    assert [(name, seed) for name, seed, _ in calls] == [("pos", 5), ("pos", 6), ("neg", 5), ("neg", 6)]
    assert calls[0][2] == tmp_path / "runs" / "pos-seed5"
    assert table.exit_code() == 1 and table.failing_seeds("pos") == [6] and table.failing_seeds("neg") == [6]
    finished = [line for line in said if not line.endswith("running")]
    assert finished[1].startswith("[2/4] pos seed 6: INVALID in ")
    assert finished[3].startswith("[4/4] neg seed 6: ERROR (RuntimeError: stack died) in ")

    data = json.loads((tmp_path / table_module.TABLE_JSON).read_text())
    assert data["complete"] is True and data["exit_code"] == 1 and data["stress"] == 1
    assert [(r["scenario"], r["seed"], r["verdict"], r["ok"]) for r in data["runs"]] == [
        ("pos", 5, "valid", True), ("pos", 6, "INVALID", False), ("neg", 5, "caught", True), ("neg", 6, "ERROR", False)]
    assert (tmp_path / table_module.TABLE_MD).read_text() == table.markdown()

    suite = ET.parse(tmp_path / table_module.JUNIT_XML).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")
    verdict_tags = {(c.get("classname"), c.get("name")): [e.tag for e in c if e.tag != "system-out"] for c in suite}
    assert verdict_tags == {("pos", "seed 5"): [], ("pos", "seed 6"): ["failure"],
                            ("neg", "seed 5"): [], ("neg", "seed 6"): ["error"]}


def test_the_table_on_disk_is_rewritten_after_each_run(tmp_path: Path) -> None:
    """A sweep killed half-way still leaves what it saw (and says it is incomplete)."""
    seen: list[int] = []

    def run_one(scenario: FakeScenario, seed: int, run_dir: Path) -> FakeResult:
        seen.append(len(json.loads((tmp_path / table_module.TABLE_JSON).read_text())["runs"]))
        return FakeResult(True, run_dir)

    run_sweep([FakeScenario("pos")], [1, 2, 3], tmp_path, run_one, lambda _m: None)
    assert seen == [0, 1, 2]


def test_an_interrupt_is_not_swallowed_as_a_harness_error(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        run_sweep([FakeScenario("pos")], [1, 2], tmp_path, scripted({("pos", 1): KeyboardInterrupt()}), lambda _m: None)
    data = json.loads((tmp_path / table_module.TABLE_JSON).read_text())
    assert data["complete"] is False and data["exit_code"] == 2


def test_seeds_count_up_from_the_first() -> None:
    assert sweep_seeds(7, 3) == [7, 8, 9]


@pytest.mark.parametrize(("argv", "message"), [
    (["--seeds", "0"], "argument --seeds: must be 1 or more, got 0"),
    (["--seeds", "ten"], "argument --seeds: expected a whole number, got 'ten'"),
    (["--stress", "-1"], "argument --stress: must be 0 or more, got -1"),
    (["--stress", "4096"], "argument --stress: 4096 cores asked, this machine has"),
    (["--scenario", "nope"], "argument --scenario: invalid choice: 'nope'"),
    (["--first-seed", "1.5"], "argument --first-seed: expected a whole number, got '1.5'"),
    (["--time-scale", "0"], "argument --time-scale: must be greater than 0, got 0"),
    (["--target", "k8s"], "argument --target: invalid choice: 'k8s'"),
    (["--target", "compose", "--scenario", "worker_kill", "--scenario", "answer_revisions"],
     "argument --target: compose cannot run answer_revisions: links ['web_1', 'web_2']"),
])
def test_bad_options_name_the_option(argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["sweep", *argv, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_main_runs_the_chosen_scenarios_under_the_hog_and_returns_the_table_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import chaos.runner as scenario_module

    hogs: list[tuple[str, int]] = []

    class RecordingHog:
        def __init__(self, cores: int) -> None:
            self.cores, self.pids = cores, []

        def __enter__(self) -> RecordingHog:
            hogs.append(("start", self.cores))
            return self

        def __exit__(self, *exc: object) -> None:
            hogs.append(("stop", self.cores))

    def fake_run_scenario(scenario: Any, seed: int, **kwargs: Any) -> FakeResult:
        hogs.append(("run", seed))
        assert kwargs["target"] == "embedded"  # the default; --target compose passes "compose"
        return FakeResult(seed != 4, kwargs["run_dir"])  # the negative control is caught for seed 4 only

    monkeypatch.setattr(sweep_module, "CpuHog", RecordingHog)
    monkeypatch.setattr(scenario_module, "run_scenario", fake_run_scenario)
    code = cli_main(["sweep", "--seeds", "2", "--first-seed", "4", "--stress", "1", "--out", str(tmp_path),
                     "--scenario", "sms_no_idempotency", "--scenario", "sms_no_idempotency"])
    assert code == 1  # seed 5 reported valid: the negative control was missed
    assert hogs == [("start", 1), ("run", 4), ("run", 5), ("stop", 1)]
    out = capsys.readouterr().out
    assert "| sms_no_idempotency | caught | caught | MISSED | 5" in " ".join(out.split())
    stamped = [p for p in tmp_path.iterdir() if p.name != "latest"]
    assert len(stamped) == 1 and (tmp_path / "latest").resolve() == stamped[0].resolve()


def test_main_stops_the_hog_and_exits_130_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import chaos.runner as scenario_module

    stopped: list[bool] = []

    class RecordingHog:
        pids: list[int] = []

        def __init__(self, cores: int) -> None:
            pass

        def __enter__(self) -> RecordingHog:
            return self

        def __exit__(self, *exc: object) -> None:
            stopped.append(True)

    def interrupted(*_args: Any, **_kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "CpuHog", RecordingHog)
    monkeypatch.setattr(scenario_module, "run_scenario", interrupted)
    assert cli_main(["sweep", "--seeds", "1", "--out", str(tmp_path), "--scenario", "worker_kill"]) == 130
    assert stopped == [True]
    assert "interrupted" in capsys.readouterr().err


def test_every_catalogue_scenario_but_demo_runs_by_default() -> None:
    from chaos.scenarios import SCENARIOS

    args = sweep_module._parse([], SCENARIOS)
    assert [s.name for s in args.scenarios] == [n for n in SCENARIOS if n != "demo"]
    assert args.seeds == 10 and args.stress == 0


def test_exports_are_exact() -> None:
    assert sorted(sweep_module.__all__) == sorted(
        ["DEFAULT_FIRST_SEED", "EXCLUDED_BY_DEFAULT", "SWEEP_ROOT", "main", "run_sweep", "sweep_seeds"])
    assert sorted(table_module.__all__) == sorted(
        ["JUNIT_XML", "TABLE_JSON", "TABLE_MD", "RunOutcome", "SweepTable", "cell_word", "met_expectation"])


def test_a_crashed_sweep_exits_2_not_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Python's own exit code for an uncaught exception is 1, which a CI gate reads as invalid."""
    def no_room(_root: Path) -> Path:
        raise OSError("No space left on device")

    monkeypatch.setattr(sweep_module, "_stamp_dir", no_room)
    assert cli_main(["sweep", "--seeds", "1", "--out", str(tmp_path), "--scenario", "worker_kill"]) == 2
    assert "proctor sweep: harness error: OSError: No space left on device" in capsys.readouterr().err


def test_without_out_the_sweep_writes_under_the_results_folder_every_run_uses(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """PROCTOR_RESULTS_DIR moves every run folder; a sweep once still wrote under ./results/sweep."""
    roots: list[Path] = []

    def record(root: Path) -> Path:
        roots.append(root)
        raise OSError("stop here")

    monkeypatch.setenv("PROCTOR_RESULTS_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(sweep_module, "_stamp_dir", record)
    assert cli_main(["sweep", "--seeds", "1", "--scenario", "worker_kill"]) == 2
    assert roots == [tmp_path / "elsewhere" / "sweep"]
