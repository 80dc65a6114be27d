from pathlib import Path

from stack.paths import bench_dir, results_dir, runs_dir


def test_results_default_to_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert results_dir({}) == tmp_path.resolve() / "results"
    assert runs_dir({}) == tmp_path.resolve() / "results" / "runs"
    assert bench_dir({}) == tmp_path.resolve() / "results" / "bench"


def test_the_environment_moves_every_folder(tmp_path: Path) -> None:
    env = {"PROCTOR_RESULTS_DIR": str(tmp_path / "elsewhere")}
    assert runs_dir(env) == (tmp_path / "elsewhere" / "runs").resolve()
    assert bench_dir(env) == (tmp_path / "elsewhere" / "bench").resolve()


def test_the_stack_puts_run_folders_and_latest_where_the_rule_says(tmp_path: Path, monkeypatch) -> None:
    """Read when a run starts, not when the package was imported (nor from the package's location)."""
    from stack.embedded.cli import _run_dir_arg
    from stack.paths import new_run_dir as default_run_dir
    from stack.paths import update_latest_link

    monkeypatch.setenv("PROCTOR_RESULTS_DIR", str(tmp_path / "res"))
    run_dir = default_run_dir("demo")
    assert run_dir.parent == (tmp_path / "res" / "runs").resolve() and run_dir.name.endswith("-demo")
    run_dir.mkdir(parents=True)
    assert update_latest_link(run_dir) == (tmp_path / "res" / "runs").resolve() / "latest"
    assert (tmp_path / "res" / "runs" / "latest").resolve() == run_dir.resolve()
    assert _run_dir_arg("proctor status", []).run_dir is None  # every stack under runs_dir(), read now
    from stack.embedded.registry import running_stacks
    assert running_stacks(tmp_path / "res" / "runs") == []
