"""examples/github-actions/proctor-chaos.yml: a structural check (PyYAML is not a dependency)
that the example gates on the sweep's real exit codes, runs a command the real parser accepts,
and uploads the files the sweep really writes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import chaos.sweep.command as sweep_module
from chaos.report import REPORT_MD
from chaos.scenarios import SCENARIOS
from chaos.sweep.table import JUNIT_XML, TABLE_JSON, TABLE_MD, SweepTable

WORKFLOW = Path(__file__).resolve().parents[2] / "examples" / "github-actions" / "proctor-chaos.yml"
STEP_INDENT = " " * 6


def steps() -> list[dict[str, str]]:
    """Each step as {key: text}: keys sit 8 spaces in, deeper lines continue the last key."""
    body = WORKFLOW.read_text().split("\n    steps:\n", 1)[1]
    parsed: list[dict[str, str]] = []
    key = ""
    for line in body.splitlines():
        if line.startswith(STEP_INDENT + "- "):
            parsed.append({})
            line = STEP_INDENT + "  " + line[len(STEP_INDENT) + 2:]
        match = re.match(r"^ {8}([a-z-]+):\s?(.*)$", line)
        if match:
            key = match.group(1)
            parsed[-1][key] = match.group(2).strip().strip('"')
        elif line.strip():
            parsed[-1][key] += "\n" + line.strip()
    return parsed


def step_named(name: str) -> dict[str, str]:
    return next(s for s in steps() if s.get("name") == name)


def test_the_workflow_is_block_yaml_with_the_top_level_keys() -> None:
    text = WORKFLOW.read_text()
    assert "\t" not in text, "YAML forbids tabs for indentation"
    assert all((len(line) - len(line.lstrip(" "))) % 2 == 0 for line in text.splitlines())
    assert [line.split(":")[0] for line in text.splitlines() if re.match(r"^[a-z]", line)] == ["name", "on", "jobs"]
    assert len(steps()) == 7 and all("name" in s or "uses" in s for s in steps())


def test_the_sweep_step_runs_a_command_the_real_parser_accepts_and_keeps_its_exit_code() -> None:
    run = step_named("Chaos sweep")["run"]
    command = next(line for line in run.splitlines() if "proctor sweep" in line)
    argv = shlex.split(command)
    assert argv[:2] == [".venv/bin/proctor", "sweep"]
    args = sweep_module._parse(argv[2:], SCENARIOS)
    assert args.seeds >= 1
    assert "set +e" in run and 'echo "exit_code=$?" >> "$GITHUB_OUTPUT"' in run  # the code right after the sweep
    assert f"results/sweep/latest/{TABLE_MD}" in run


@pytest.mark.parametrize(("code", "step", "words"), [
    ("1", "Verdict: invalid", "an invariant was violated"),
    ("2", "Verdict: unknown", "unknown: the run could not prove the invariants"),
])
def test_invalid_and_unknown_each_fail_in_their_own_step(code: str, step: str, words: str) -> None:
    verdict = step_named(step)
    assert verdict["if"] == f"steps.sweep.outputs.exit_code == '{code}'"
    assert "::error " in verdict["run"] and words in verdict["run"] and verdict["run"].endswith("exit 1")


def test_the_exit_codes_the_workflow_names_are_the_sweeps() -> None:
    """Tie the example to the code: 1 for a contradiction, 2 for could-not-tell."""
    assert SweepTable([("s", True)], [1], []).exit_code() == 2  # nothing ran: not a pass
    unexpected = step_named("Verdict: unexpected exit code")
    assert all(f"!= '{c}'" in unexpected["if"] for c in "012") and unexpected["run"].endswith("exit 1")


def test_evidence_is_uploaded_whatever_happened_and_names_what_the_sweep_writes() -> None:
    upload = step_named("Upload the verdict table, JUnit file and run folders")
    assert upload["if"] == "always()" and upload["uses"].startswith("actions/upload-artifact@")
    paths = upload["with"]
    for name in (TABLE_MD, TABLE_JSON, JUNIT_XML, f"runs/*/{REPORT_MD}", "runs/*/*.png"):
        assert f"results/sweep/*/{name}" in paths, name
    assert sweep_module.SWEEP_ROOT == Path("results/sweep")
