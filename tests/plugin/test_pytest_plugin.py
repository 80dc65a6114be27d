"""The chaos pytest plugin as a user's repo meets it: installed, no conftest copied.

Each test writes a small test file into a pytester folder (no conftest.py, no ini) and runs
pytest there in-process; the plugin arrives through the ``pytest11`` entry point only.
``-p no:locust``: locust's own pytest11 plugin would monkeypatch the process with gevent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import chaos.pytest_plugin as plugin_module
import chaos.runner  # noqa: F401 - before the in-process runs: pytester restores sys.modules, numpy loads once

pytestmark = pytest.mark.usefixtures("results_env")

NO_LOCUST = ("-p", "no:locust")

SEES_OPTIONS = """
def test_sees(request, chaos_seed, run_chaos):
    config = request.config
    print("SEEN", chaos_seed, config.getoption("chaos_time_scale"), config.getoption("chaos_keep_stack"), callable(run_chaos))
"""


@pytest.fixture
def results_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run folders and the index go under the pytester folder, never the real results/."""
    results = pytester.path / "chaos-results"
    monkeypatch.setenv("PROCTOR_RESULTS_DIR", str(results))
    return results


def test_plugin_is_registered_once_through_its_entry_point(request: pytest.FixtureRequest) -> None:
    manager = request.config.pluginmanager
    assert manager.get_plugin("proctor-chaos") is plugin_module
    assert [p for p in manager.get_plugins() if p is plugin_module] == [plugin_module]
    assert sorted(plugin_module.__all__) == ["ChaosRun", "DEPRECATED_OPTIONS"]


def test_fixtures_and_defaults_in_a_repo_without_conftest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SEES_OPTIONS)
    result = pytester.runpytest(*NO_LOCUST, "-s", "--strict-markers")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SEEN 20261006 None False True"])
    assert not list(pytester.path.rglob("*.xml"))  # no JUnit unless asked


def test_prefixed_options_are_parsed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SEES_OPTIONS)
    result = pytester.runpytest(*NO_LOCUST, "-s", "--chaos-seed", "7", "--chaos-time-scale", "0.5", "--chaos-keep-stack")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SEEN 7 0.5 True True"])
    result.stdout.no_fnmatch_line("*deprecated*")


def test_old_option_names_still_work_and_say_they_are_deprecated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SEES_OPTIONS)
    result = pytester.runpytest(*NO_LOCUST, "-s", "--time-scale=0.25", "--keep-stack")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["chaos: --time-scale is deprecated, use --chaos-time-scale",
                                 "chaos: --keep-stack is deprecated, use --chaos-keep-stack", "*SEEN 20261006 0.25 True True"])


def test_markers_are_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.chaos
        @pytest.mark.negative_control
        def test_marked():
            pass
    """)
    pytester.runpytest(*NO_LOCUST, "--strict-markers").assert_outcomes(passed=1)


def test_the_users_junitxml_is_untouched(pytester: pytest.Pytester, results_env: Path) -> None:
    pytester.makepyfile("def test_one():\n    pass\n")
    result = pytester.runpytest(*NO_LOCUST, "--junitxml=mine.xml")
    result.assert_outcomes(passed=1)
    assert 'name="test_one"' in (pytester.path / "mine.xml").read_text()
    assert [p.name for p in pytester.path.rglob("*.xml")] == ["mine.xml"]


def test_chaos_junit_writes_where_asked_and_refuses_beside_junitxml(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_one():\n    pass\n")
    pytester.runpytest(*NO_LOCUST, "--chaos-junit", "out/chaos.xml").assert_outcomes(passed=1)
    assert 'name="test_one"' in (pytester.path / "out" / "chaos.xml").read_text()
    both = pytester.runpytest(*NO_LOCUST, "--chaos-junit", "a.xml", "--junitxml", "b.xml")
    assert both.ret == pytest.ExitCode.USAGE_ERROR
    both.stderr.fnmatch_lines(["*--chaos-junit a.xml and --junitxml b.xml: give only one*"])
    assert not (pytester.path / "a.xml").exists() and not (pytester.path / "b.xml").exists()


def test_the_session_index_goes_under_the_results_dir(pytester: pytest.Pytester, results_env: Path) -> None:
    """run_chaos with the runner replaced: the index lands in $PROCTOR_RESULTS_DIR, not ./results."""
    pytester.makepyfile(test_runs="""
        from pathlib import Path
        from types import SimpleNamespace

        import pytest

        import chaos.runner

        @pytest.fixture(autouse=True)
        def no_stack(monkeypatch):  # autouse: in place before run_chaos imports the runner
            fake = SimpleNamespace(run_dir=Path("runs/x"), valid=True, verdict={"checkers": {}}, reproduce="proctor run x")
            monkeypatch.setattr(chaos.runner, "run_scenario", lambda *args, **kwargs: fake)

        def test_runs(run_chaos):
            assert run_chaos("worker_kill").run_dir == Path("runs/x")
    """)
    result = pytester.runpytest(*NO_LOCUST)
    result.assert_outcomes(passed=1)
    assert "| test_runs.py::test_runs | True | True |" in (results_env / "index.md").read_text()
    assert not (pytester.path / "results").exists()


PLOTS_RECORDED = """
    import json
    from pathlib import Path
    from types import SimpleNamespace

    import pytest

    import chaos.analyze
    import chaos.runner

    @pytest.fixture(autouse=True)
    def no_stack(monkeypatch):
        def run(scenario, *args, **kwargs):
            print("RUN", scenario.name, "plots", kwargs["plots"])
            return SimpleNamespace(run_dir=Path(scenario.name), valid=True, verdict={"checkers": {}}, reproduce="r")

        monkeypatch.setattr(chaos.runner, "run_scenario", run)
        monkeypatch.setattr(chaos.analyze, "analyze", lambda run_dir, plots: print("DRAWN", run_dir, plots))

    def test_passes(run_chaos):
        run_chaos("worker_kill")

    def test_fails(run_chaos):
        run_chaos("web_node_kill")
        assert False, "the scenario's verdict"
"""


@pytest.mark.parametrize("option, drawn_after_failure, plots_during_run", [
    ((), ["DRAWN web_node_kill True"], False),
    (("--chaos-plots", "always"), [], True),
    (("--chaos-plots", "never"), [], False),
])
def test_plots_are_drawn_for_failed_tests_only_unless_asked(pytester: pytest.Pytester, option: tuple[str, ...],
                                                            drawn_after_failure: list[str],
                                                            plots_during_run: bool) -> None:
    pytester.makepyfile(test_plots=PLOTS_RECORDED)
    result = pytester.runpytest(*NO_LOCUST, "-s", *option)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()  # the prints may share a line with pytest's progress
    assert re.findall(r"RUN \w+ plots \w+", out) == [
        f"RUN worker_kill plots {plots_during_run}", f"RUN web_node_kill plots {plots_during_run}"], out
    assert re.findall(r"DRAWN \w+ \w+", out) == drawn_after_failure, out


def test_a_bad_plots_choice_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_one():\n    pass\n")
    result = pytester.runpytest(*NO_LOCUST, "--chaos-plots", "sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--chaos-plots*invalid choice*sometimes*"])
