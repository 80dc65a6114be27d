"""loadtests/ramp_connect_timeouts.py, the seed's timeouts under the ramp: what it starts, the toxic
it sends, and the rule it judges by (the connections checker's own). The ramp itself is run by hand;
docs/valkey.md notes what it measured."""

import importlib.util
import sys
from argparse import Namespace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("ramp_connect_timeouts", ROOT / "loadtests" / "ramp_connect_timeouts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("ramp_connect_timeouts", None)


def _counted(timeouts: int, connects: int) -> dict:
    return {"connects": connects, "timeouts": {"handshake": timeouts} if timeouts else {}, "timeout_total": timeouts}


def test_the_stack_puts_web_1_fresh_and_web_2_pooled_behind_the_one_slow_link(script, tmp_path) -> None:
    argv = script.stack_argv(tmp_path, 0.5)
    assert argv[argv.index("--link") + 1] == "valkey_web"
    sets = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
    assert sets == ["PROCTOR_VALKEY_CONNECT_TIMEOUT=0.5", "web_1:PROCTOR_VALKEY_FRESH_CONNECTIONS=on"]


def test_the_toxic_slows_only_the_first_bytes_of_each_new_connection_upstream(script) -> None:
    toxic = script.toxic(Namespace(delay_ms=450, jitter_ms=250))
    assert toxic["type"] == "slow_open" and toxic["stream"] == "upstream"
    assert toxic["attributes"] == {"delay": 450, "jitter": 250}  # whole ms: the API refuses a fraction


def test_fresh_timeouts_ten_times_the_pooled_hold(script) -> None:
    code, figures = script.judge({"web_1": _counted(31, 280), "web_2": _counted(1, 6)})
    assert code == 0 and figures["derivation"] == "fresh 31 >= 10 x max(1, pooled 1) = 10: held"


def test_a_pool_with_timeouts_of_the_fresh_nodes_order_fails(script) -> None:
    code, figures = script.judge({"web_1": _counted(31, 280), "web_2": _counted(9, 300)})
    assert code == 1 and figures["violations"]["fresh_timeouts_under_ratio"], figures


def test_a_pool_that_timed_out_more_often_than_it_connected_fails(script) -> None:
    code, figures = script.judge({"web_1": _counted(400, 900), "web_2": _counted(8, 5)})
    assert code == 1 and figures["violations"]["pooled_timeouts_over_connects"] == [
        {"component": "web_2", "timeouts": 8, "connects": 5}]


def test_no_counters_of_a_node_is_unknown_never_held(script) -> None:
    code, figures = script.judge({"web_1": _counted(31, 280)})
    assert code == 2 and "web_2" in figures["unknown"][0]


def test_the_table_prints_both_nodes_beside_the_seeds_figure(script) -> None:
    counted = {"web_1": _counted(31, 280), "web_2": _counted(0, 5)}
    _code, figures = script.judge(counted)
    text = script.render(figures, counted, {"applied": True})
    assert "| web_1 | fresh | 280 | 31 | {\"handshake\": 31} |" in text
    assert "| web_2 | pooled | 5 | 0 | {} |" in text
    assert "| 2,854 |" in text and "fresh 31 >= 10 x max(1, pooled 0) = 10: held" in text
