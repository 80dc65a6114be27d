"""The verdict table of `proctor sweep`: one row per scenario, one column per seed.

A run meets its expectation when a positive scenario is reported valid, or a negative
control (``Scenario.expect_valid`` False) is reported invalid: it was caught. Unknown
or a harness error meets neither: "could not tell" is not a pass. The table is written
as markdown, JSON and JUnit (invalid/missed are failures, unknown/error are errors),
so a CI job can show it, gate on it and keep it.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.analyze import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID

__all__ = ["JUNIT_XML", "TABLE_JSON", "TABLE_MD", "RunOutcome", "SweepTable", "cell_word", "met_expectation"]

TABLE_MD, TABLE_JSON, JUNIT_XML = "table.md", "table.json", "junit.xml"


def met_expectation(expect_valid: bool, valid: Any) -> bool:
    """True only for the verdict the scenario promises; "unknown" never counts."""
    return valid is True if expect_valid else valid is False


def cell_word(expect_valid: bool, valid: Any, error: str | None = None) -> str:
    """What the table shows: lower case met the expectation, UPPER CASE did not."""
    if error is not None:
        return "ERROR"
    if met_expectation(expect_valid, valid):
        return "valid" if expect_valid else "caught"
    if valid is False:
        return "INVALID"
    if valid is True:
        return "MISSED"  # a negative control reported valid: the checkers did not see the violation
    return "UNKNOWN"


@dataclass(frozen=True)
class RunOutcome:
    """One scenario run for one seed, as the sweep saw it."""

    scenario: str
    seed: int
    expect_valid: bool
    valid: Any  # True | False | "unknown" | None after a harness error
    wall_seconds: float
    run_dir: str | None = None
    reproduce: str | None = None
    error: str | None = None  # "ExcType: message" when the harness raised

    @property
    def ok(self) -> bool:
        return self.error is None and met_expectation(self.expect_valid, self.valid)

    @property
    def word(self) -> str:
        return cell_word(self.expect_valid, self.valid, self.error)

    @property
    def definite_failure(self) -> bool:
        """A verdict that contradicts the expectation (not merely "could not tell")."""
        return self.word in {"INVALID", "MISSED"}

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "verdict": self.word}


@dataclass
class SweepTable:
    scenarios: list[tuple[str, bool]]  # (name, expect_valid) in row order
    seeds: list[int]
    outcomes: list[RunOutcome]
    stress: int = 0
    stamp: str = ""

    @property
    def expected_runs(self) -> int:
        return len(self.scenarios) * len(self.seeds)

    @property
    def complete(self) -> bool:
        return len(self.outcomes) == self.expected_runs

    def outcome(self, scenario: str, seed: int) -> RunOutcome | None:
        return next((o for o in self.outcomes if o.scenario == scenario and o.seed == seed), None)

    def failing_seeds(self, scenario: str) -> list[int]:
        return [o.seed for o in self.outcomes if o.scenario == scenario and not o.ok]

    def exit_code(self) -> int:
        """0 only if every run ran and met its expectation; 1 if a verdict contradicted one;
        else 2 (unknown, a harness error, or runs missing)."""
        if any(o.definite_failure for o in self.outcomes):
            return EXIT_INVALID
        if self.complete and all(o.ok for o in self.outcomes):
            return EXIT_VALID
        return EXIT_UNKNOWN

    def summary(self) -> str:
        met = sum(o.ok for o in self.outcomes)
        missing = self.expected_runs - len(self.outcomes)
        text = (f"{len(self.scenarios)} scenarios x {len(self.seeds)} seeds, stress {self.stress} core(s): "
                f"{met} of {len(self.outcomes)} runs met their expectation")
        return text + (f", {missing} not run" if missing else "")

    def markdown(self) -> str:
        header = ["scenario", "expect", *map(str, self.seeds), "failing seeds"]
        rows = [header]
        for name, expect_valid in self.scenarios:
            cells = [(o.word if o else "-") for o in (self.outcome(name, seed) for seed in self.seeds)]
            failing = ", ".join(map(str, self.failing_seeds(name))) or "none"
            rows.append([name, "valid" if expect_valid else "caught", *cells, failing])
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |" for row in rows]
        lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
        legend = ("valid / caught: met the expectation (a negative control must be caught, i.e. reported "
                  "invalid). INVALID: a positive scenario was reported invalid. MISSED: a negative control "
                  "was reported valid. UNKNOWN: the checkers could not tell. ERROR: the harness failed. "
                  "-: not run.")
        return "\n".join([f"# Sweep {self.stamp}".rstrip(), "", self.summary(), "", *lines, "", legend, ""])

    def as_dict(self) -> dict[str, Any]:
        return {"stamp": self.stamp, "seeds": self.seeds, "stress": self.stress, "complete": self.complete,
                "exit_code": self.exit_code(),
                "scenarios": [{"name": n, "expect_valid": e, "failing_seeds": self.failing_seeds(n)}
                              for n, e in self.scenarios],
                "runs": [o.as_dict() for o in self.outcomes]}

    def junit(self) -> str:
        suite = ET.Element("testsuite", name="proctor-sweep", tests=str(len(self.outcomes)),
                           failures=str(sum(o.definite_failure for o in self.outcomes)),
                           errors=str(sum(not o.ok and not o.definite_failure for o in self.outcomes)))
        for o in self.outcomes:
            case = ET.SubElement(suite, "testcase", classname=o.scenario, name=f"seed {o.seed}",
                                 time=f"{o.wall_seconds:.1f}")
            if not o.ok:
                tag = "failure" if o.definite_failure else "error"
                ET.SubElement(case, tag, message=f"{o.word}: expected {'valid' if o.expect_valid else 'caught'}",
                              type=o.word).text = o.error or ""
            ET.SubElement(case, "system-out").text = f"run folder: {o.run_dir}\nreproduce: {o.reproduce}"
        return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"

    def write(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / TABLE_MD).write_text(self.markdown(), encoding="utf-8")
        (out_dir / TABLE_JSON).write_text(json.dumps(self.as_dict(), indent=2, default=str), encoding="utf-8")
        (out_dir / JUNIT_XML).write_text(self.junit(), encoding="utf-8")
