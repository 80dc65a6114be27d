"""`proctor up --set [COMPONENT:]VARIABLE=VALUE`: settings for every component or for one, parsed by the
variable's own parser, carried to the detached child unchanged."""

from pathlib import Path

from stack.embedded import cli


def _args(*extra: str):
    return cli._up_parser().parse_args(["--run-dir", "/tmp/proctor-up-settings", *extra])


def test_a_setting_for_everyone_and_one_for_a_single_node_land_where_they_belong() -> None:
    args = _args("--set", "PROCTOR_VALKEY_CONNECT_TIMEOUT=0.5", "--set", "web_1:PROCTOR_VALKEY_FRESH_CONNECTIONS=on",
                 "--time-scale", "0.02")
    spec = cli._spec_from_args(args)
    assert spec.settings_overrides == {"valkey_connect_timeout": 0.5, "time_scale": 0.02}
    assert spec.component_settings == {"web_1": {"valkey_fresh_connections": True}}
    spec.validate()


def test_the_detached_child_gets_the_same_assignments_as_given() -> None:
    args = _args("--set", "web_2:PROCTOR_VALKEY_FRESH_CONNECTIONS=off", "--set", "PROCTOR_VALKEY_CONNECT_TIMEOUT=1")
    argv = cli._child_argv(args, Path("/tmp/proctor-up-settings"))
    assert [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"] == [
        "web_2:PROCTOR_VALKEY_FRESH_CONNECTIONS=off", "PROCTOR_VALKEY_CONNECT_TIMEOUT=1"]


def test_a_worker_of_a_lane_with_more_workers_may_be_named() -> None:
    spec = cli._spec_from_args(_args("--merit-workers", "3", "--set", "worker_merit_3:PROCTOR_VALKEY_CONNECT_TIMEOUT=0.3"))
    assert spec.component_settings == {"worker_merit_3": {"valkey_connect_timeout": 0.3}}
