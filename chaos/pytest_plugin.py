"""pytest plugin for chaos scenarios: ``--chaos-*`` options, markers, fixtures.

Registered through the ``pytest11`` entry point ``proctor-chaos`` (pyproject.toml), so
``pip install proctor`` then ``pytest`` in any repo has it; ``-p no:proctor-chaos`` turns it
off. A failing scenario prints the one command that reproduces it; every run leaves a folder
under ``<results>/runs/`` (stack/paths.py: ``$PROCTOR_RESULTS_DIR`` or ``./results``) and
the session writes ``<results>/index.md`` and ``index.json`` listing the runs. JUnit XML
only when asked (``--chaos-junit PATH``); a user's own ``--junitxml`` is never touched.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from stack.paths import results_dir

__all__ = ["ChaosRun", "DEPRECATED_OPTIONS"]

_RUNS_KEY = pytest.StashKey[list]()
DEPRECATED_OPTIONS = {"--time-scale": "--chaos-time-scale", "--keep-stack": "--chaos-keep-stack"}
"""Old option names, still accepted for one release: old name -> new name."""
PLOTS_CHOICES = ("failed", "always", "never")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "Proctor chaos scenarios")
    group.addoption("--chaos-seed", type=int, default=None,
                    help="seed for fault schedules and workloads (default: chaos_seed ini, 20261006)")
    group.addoption("--chaos-time-scale", "--time-scale", dest="chaos_time_scale", type=float, default=None,
                    help="real seconds per case second for every seed duration (default: scenario's, 0.01); "
                         "--time-scale is a deprecated alias")
    group.addoption("--chaos-keep-stack", "--keep-stack", dest="chaos_keep_stack", action="store_true", default=False,
                    help="leave each scenario's stack running for inspection (stop: proctor down RUN_DIR); "
                         "--keep-stack is a deprecated alias")
    group.addoption("--chaos-junit", metavar="PATH", default=None,
                    help="write JUnit XML of this session to PATH (pytest's --junitxml under another name: "
                         "give one or the other)")
    group.addoption("--chaos-target", choices=("embedded", "compose"), default="embedded",
                    help="the deployment scenarios run against: embedded (local processes) or compose "
                         "(docker-compose.yml through the docker SDK; docs/compose.md)")
    group.addoption("--chaos-plots", choices=PLOTS_CHOICES, default="failed",
                    help="draw each run's PNG plots: for failed tests only (default; about 2 CPU s a run "
                         "saved on the others), always, or never (proctor check RUN_DIR draws them later)")
    parser.addini("chaos_seed", "default seed for chaos scenarios", default="20261006")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: an end-to-end chaos scenario (stack + load + faults -> verdict)")
    config.addinivalue_line("markers", "negative_control: a scenario with a safeguard off; passes only if "
                                       "the checkers report the violation")
    _junit_when_asked(config)
    config.stash[_RUNS_KEY] = []


def _junit_when_asked(config: pytest.Config) -> None:
    """--chaos-junit PATH hands PATH to pytest's own JUnit writer, which runs after this
    hook; with a --junitxml of the user's as well, one of them would be lost: refuse."""
    path = config.getoption("chaos_junit")
    if path is None:
        return
    if getattr(config.option, "xmlpath", None):
        raise pytest.UsageError(f"--chaos-junit {path} and --junitxml {config.option.xmlpath}: give only one")
    config.option.xmlpath = path


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Name a deprecated option where the user looks first: the session header."""
    used = [old for old in DEPRECATED_OPTIONS if _given(config, old)]
    return [f"chaos: {old} is deprecated, use {DEPRECATED_OPTIONS[old]}" for old in used]


def _given(config: pytest.Config, option: str) -> bool:
    return any(arg == option or arg.startswith(option + "=") for arg in config.invocation_params.args)


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
        """The value of every fault-start op: what the nemesis did (or failed to do)."""
        from chaos.history import FAULT_START, NEMESIS, read_history

        ops = read_history(self.run_dir / "history.jsonl").ops
        return [op.value for op in ops if op.process == NEMESIS and op.f == FAULT_START]

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
    """Run a named scenario (chaos/scenarios/__init__.py) with the session's seed and time scale."""
    from chaos.deployment.targets import unsupported_on
    from chaos.runner import run_scenario
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
        result = run_scenario(scenario, chaos_seed, time_scale=request.config.getoption("chaos_time_scale"),
                              keep_stack=request.config.getoption("chaos_keep_stack"), progress=_progress(name),
                              target=target, plots=request.config.getoption("chaos_plots") == "always")
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
        if item.config.getoption("chaos_plots") == "failed":
            _draw_plots(run)
        report.sections.append(("chaos", f"reproduce with:\n  {run.reproduce}\n{run.summary()}"))
    return report


def _draw_plots(run: ChaosRun) -> None:
    """A failed test's run folder gets its plots after all: judged again, with them (the same
    verdict, from the same files). A plotting failure is the report's note, never the test's."""
    from chaos.analyze import analyze

    try:
        analyze(run.run_dir, plots=True)
    except Exception as exc:  # noqa: BLE001 - the test's own failure is what the report must show
        print(f"[proctor] plots for {run.run_dir} failed: {type(exc).__name__}: {exc}")


def _index_name(config: pytest.Config) -> tuple[str, str]:
    """The target and its index file's stem: a compose pass keeps the embedded pass's index."""
    target = config.getoption("--chaos-target")
    return target, "index" if target == "embedded" else f"index-{target}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    runs = session.config.stash.get(_RUNS_KEY, [])
    if not runs:
        return
    results = results_dir()
    results.mkdir(parents=True, exist_ok=True)
    target, index = _index_name(session.config)
    lines = [f"# Chaos runs ({target})", "", "| test | valid | expected | seconds | run folder | reproduce |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['test']} | {r['valid']} | {r['expect_valid']} | {r['seconds']} | {r['run_dir']} | `{r['reproduce']}` |"
              for r in runs]
    (results / f"{index}.md").write_text("\n".join(lines) + "\n")
    (results / f"{index}.json").write_text(json.dumps(runs, indent=2))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    runs = terminalreporter.config.stash.get(_RUNS_KEY, [])
    if runs:
        target, index = _index_name(terminalreporter.config)
        terminalreporter.write_sep("-", f"chaos runs on {target} ({results_dir() / (index + '.md')})")
        for r in runs:
            terminalreporter.write_line(f"{r['scenario']}: valid={r['valid']} (expected {r['expect_valid']}) "
                                        f"{r['seconds']}s -> {r['run_dir']}")
