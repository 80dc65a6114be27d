"""pytest plugin for chaos scenarios: ``--chaos-*`` options, markers, fixtures.

Loaded by the root ``conftest.py``. A failing scenario prints the one command
that reproduces it; every run leaves a folder under results/runs/ and the session
writes ``results/junit.xml`` and ``results/index.md`` listing the runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest

__all__ = ["ChaosRun"]

RESULTS = Path("results")
_RUNS_KEY = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "Proctor chaos scenarios")
    group.addoption("--chaos-seed", type=int, default=None,
                    help="seed for fault schedules and workloads (default: chaos_seed ini, 20261006)")
    group.addoption("--time-scale", type=float, default=None,
                    help="real seconds per case second for every seed duration (default: scenario's, 0.01)")
    group.addoption("--keep-stack", action="store_true", default=False,
                    help="leave each scenario's stack running for inspection (stop: proctor down RUN_DIR)")
    group.addoption("--chaos-target", choices=("embedded", "compose"), default="embedded",
                    help="the deployment scenarios run against: embedded (local processes) or compose "
                         "(docker-compose.yml through the docker SDK; docs/compose.md)")
    parser.addini("chaos_seed", "default seed for chaos scenarios", default="20261006")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: an end-to-end chaos scenario (stack + load + faults -> verdict)")
    config.addinivalue_line("markers", "negative_control: a scenario with a safeguard off; passes only if "
                                       "the checkers report the violation")
    if getattr(config.option, "xmlpath", None) is None and not hasattr(config, "workerinput"):
        RESULTS.mkdir(exist_ok=True)
        config.option.xmlpath = str(RESULTS / "junit.xml")
    config.stash[_RUNS_KEY] = []


class ChaosRun:
    """What a scenario test gets back: the verdict, the run folder, and helpers to read them."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.run_dir: Path = result.run_dir
        self.valid = result.valid
        self.verdict: dict[str, Any] = result.verdict
        self.reproduce: str = result.reproduce

    def checker(self, name: str) -> dict[str, Any]:
        return self.verdict["checkers"][name]

    def faults(self) -> list[dict[str, Any]]:
        path = self.run_dir / "history.jsonl"
        ops = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [op["value"] for op in ops if op.get("f") == "fault-start"]

    def recheck(self) -> int:
        """`proctor check RUN_DIR` on the stored files: must reach the same verdict offline."""
        from chaos.analyze import check_command

        return check_command(self.run_dir, plots=False)

    def summary(self) -> str:
        parts = [f"valid={self.valid}", f"run folder: {self.run_dir}", f"reproduce: {self.reproduce}"]
        for name, res in self.verdict.get("checkers", {}).items():
            parts.append(f"  {name}: valid={res.get('valid')} counts={res.get('counts')}")
        return "\n".join(parts)


@pytest.fixture
def chaos_seed(request: pytest.FixtureRequest) -> int:
    seed = request.config.getoption("--chaos-seed")
    return int(seed if seed is not None else request.config.getini("chaos_seed"))


@pytest.fixture
def run_chaos(request: pytest.FixtureRequest, chaos_seed: int) -> Callable[[str], ChaosRun]:
    """Run a named scenario (chaos/scenarios.py) with the session's seed and time scale."""
    from chaos.deployment.targets import unsupported_on
    from chaos.scenario import run_scenario
    from chaos.scenarios import get_scenario

    def run(name: str) -> ChaosRun:
        scenario = get_scenario(name)
        target = request.config.getoption("--chaos-target")
        reason = unsupported_on(target, scenario)
        if reason:
            pytest.skip(f"{name} does not run on {target}: {reason}")
        if target == "compose":
            request.getfixturevalue("compose_engine")
        started = time.monotonic()
        result = run_scenario(scenario, chaos_seed, time_scale=request.config.getoption("--time-scale"),
                              keep_stack=request.config.getoption("--keep-stack"), progress=_progress(name),
                              target=target)
        run = ChaosRun(result)
        request.config.stash[_RUNS_KEY].append(
            {"test": request.node.nodeid, "scenario": name, "seed": chaos_seed, "valid": run.valid,
             "expect_valid": scenario.expect_valid, "seconds": round(time.monotonic() - started, 1),
             "run_dir": str(run.run_dir), "reproduce": run.reproduce})
        request.node.user_properties.append(("run_dir", str(run.run_dir)))
        request.node.user_properties.append(("reproduce", run.reproduce))
        request.node.stash[_LAST_RUN] = run
        return run

    return run


_LAST_RUN = pytest.StashKey[ChaosRun]()


@pytest.fixture(scope="session")
def compose_engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Engine, base and stack image once per session (each scenario then brings up its own project);
    skips with the reason when no engine answers and none can be installed."""
    from chaos.deployment import compose_setup

    reason = compose_setup.unavailable_reason()
    if reason:
        pytest.skip(reason)
    started_engine = compose_setup.prepare_engine(tmp_path_factory.mktemp("compose-setup"))
    yield
    if started_engine:
        compose_setup.stop_engine()


def _progress(name: str) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"[{name}] {message}", flush=True)
    return say


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    run = item.stash.get(_LAST_RUN, None)
    if run is not None and report.when == "call" and report.failed:
        report.sections.append(("chaos", f"reproduce with:\n  {run.reproduce}\n{run.summary()}"))
    return report


def _index_name(config: pytest.Config) -> tuple[str, str]:
    """The target and its index file's stem: a compose pass keeps the embedded pass's index."""
    target = config.getoption("--chaos-target")
    return target, "index" if target == "embedded" else f"index-{target}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    runs = session.config.stash.get(_RUNS_KEY, [])
    if not runs:
        return
    RESULTS.mkdir(exist_ok=True)
    target, index = _index_name(session.config)
    lines = [f"# Chaos runs ({target})", "", "| test | valid | expected | seconds | run folder | reproduce |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['test']} | {r['valid']} | {r['expect_valid']} | {r['seconds']} | {r['run_dir']} | `{r['reproduce']}` |"
              for r in runs]
    (RESULTS / f"{index}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{index}.json").write_text(json.dumps(runs, indent=2))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    runs = terminalreporter.config.stash.get(_RUNS_KEY, [])
    if runs:
        target, index = _index_name(terminalreporter.config)
        terminalreporter.write_sep("-", f"chaos runs on {target} (results/{index}.md)")
        for r in runs:
            terminalreporter.write_line(f"{r['scenario']}: valid={r['valid']} (expected {r['expect_valid']}) "
                                        f"{r['seconds']}s -> {r['run_dir']}")
