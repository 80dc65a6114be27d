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
