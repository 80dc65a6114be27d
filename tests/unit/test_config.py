"""Settings: every variable parsed, bad values named, the environment round-trips."""

from pathlib import Path

import pytest

from stack.config import CASE_AI_CALL_SECONDS, Settings, SettingsError, load_settings


def test_defaults_without_environment() -> None:
    settings = load_settings({})
    assert settings == Settings()
    assert settings.scaled(CASE_AI_CALL_SECONDS) == pytest.approx(0.1)


def test_environment_round_trips_through_to_env(tmp_path: Path) -> None:
    original = Settings(time_scale=0.5, run_dir=tmp_path, exams={"A-1": 3, "B-2": 40}, max_job_attempts=2,
                        component="worker_ai_2", ready_file="/tmp/r/ready/worker_ai_2",
                        sms_allowlist=("127.0.0.1/32", "10.0.0.0/8"),
                        worker_models={"merit": "fork", "ai": "simple", "sms": "fork"}).with_overrides(
        reconciler_enabled=False, sms_idempotency=False, answer_write_behind=1.5)
    assert load_settings(original.to_env()) == original


def test_ledger_defaults_to_sqlite_in_the_run_folder(tmp_path: Path) -> None:
    assert Settings(run_dir=tmp_path).ledger_url == f"sqlite:///{(tmp_path / 'ledger.db').resolve()}"
    assert Settings(database_url="postgresql+psycopg://u@h/db").ledger_url == "postgresql+psycopg://u@h/db"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TIME_SCALE", "fast", "expected a number"),
        ("TIME_SCALE", "0", "greater than 0"),
        ("PROCTOR_MAX_JOB_ATTEMPTS", "0", "at least 1"),
        ("PROCTOR_RECONCILER", "maybe", "on/off"),
        ("PROCTOR_EXAMS", "NOVA-101", "CODE:QUESTIONS"),
        ("PROCTOR_EXAMS", "NOVA-101:x", "whole number"),
        ("PROCTOR_ANSWER_WRITE_BEHIND", "-1", "0 or more"),
        ("PROCTOR_SMS_ALLOWLIST", "127.0.0.1/32,localhost", "does not appear to be an IPv4 or IPv6 network"),
        ("PROCTOR_SMS_ALLOWLIST", " , ", "at least one network"),
        ("PROCTOR_WORKER_MODEL", "merit:spawn", "VALUE one of fork, simple"),
        ("PROCTOR_WORKER_MODEL", "web:simple", "KEY one of merit, ai, sms"),
        ("PROCTOR_WORKER_MODEL", "simple", "each entry is KEY:VALUE"),
    ],
)
def test_a_bad_value_names_the_variable(variable: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message) as caught:
        load_settings({variable: value})
    assert str(caught.value).startswith(f"{variable}=")


def test_the_run_folder_default_follows_the_results_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_RESULTS_DIR", str(tmp_path / "elsewhere"))
    assert load_settings({}).run_dir == (tmp_path / "elsewhere").resolve() / "runs" / "adhoc"


def test_a_worker_model_entry_overrides_its_lane_only() -> None:
    models = load_settings({"PROCTOR_WORKER_MODEL": " MERIT:fork "}).worker_models
    assert models == {**Settings().worker_models, "merit": "fork"}
