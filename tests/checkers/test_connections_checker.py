"""The connections checker on hand-written histories: each limit must be able to fail."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers import CheckOptions
from chaos.checkers.base import UNKNOWN, OptionsError
from chaos.checkers.connections import check_connections, counter_increase, render_details
from chaos.ledgers import Ledgers
from tests.checkers.checker_builders import HistoryBuilder


def valkey_sample(h: HistoryBuilder, at: float, *, received: int, rejected: int = 0, cpu: float = 0.0,
                  clients: dict[str, list[int]] | None = None, processes: dict[str, Any] | None = None,
                  ok: bool = True) -> None:
    value: dict[str, Any] = {"ok": ok}
    if ok:
        value.update(connected_clients=sum(len(v) for v in (clients or {}).values()), total_connections_received=received,
                     rejected_connections=rejected, used_cpu_sys=cpu / 2, used_cpu_user=cpu / 2, maxclients=10000,
                     clients=clients or {})
    else:
        value.update(error="ConnectionError: max number of clients reached", kind="max_clients")
    if processes is not None:
        value["processes"] = processes
    h.op("monitor", "info", "valkey-sample", value, at=at)


def proc(connects: int, pids: int = 1, max_process: int | None = None, **errors: int) -> dict[str, Any]:
    return {"connects": connects, "errors": errors, "error_total": sum(errors.values()), "pids": pids,
            "max_process_connects": connects if max_process is None else max_process}


def healthy_history() -> HistoryBuilder:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=10, cpu=1.0, clients={"web_1": [3], "relay": [4], "proctor-monitor": [9]},
                  processes={"web_1": proc(1), "relay": proc(1)})
    valkey_sample(h, 3.0, received=70, cpu=1.5, clients={"web_1": [3], "relay": [12], "proctor-monitor": [9]},
                  processes={"web_1": proc(1), "relay": proc(2, reset=1)})
    h.op("monitor", "info", "churn-sample", {"ops": 40, "outcomes": {"ok": 38, "connect_timeout": 1, "reset": 1},
                                            "handshakes": 39, "handshakes_per_second": 19.5}, at=3.0)
    return h


STRICT = CheckOptions(max_rejected_connections=0, max_component_connection_errors=5, max_connects_per_process=20)


def test_healthy_run_passes_and_measures() -> None:
    result = check_connections(healthy_history().ops, Ledgers(), STRICT)
    assert result.valid is True, result
    c = result.counts
    assert c["rejected_connections"] == 0 and c["rejected_over_limit"] == 0 and c["component_errors_over_limit"] == 0
    assert c["connections_received"] == 70
    assert c["handshakes_per_second"] == 30.0  # (70 - 10) / 2 s
    assert c["valkey_cpu_seconds"] == 0.5 and c["valkey_cpu_percent"] == 25.0
    assert c["component_reconnects"] == 1  # relay: id 12 is new
    assert c["component_errors"] == 1
    assert c["churn_connect_timeout"] == 1 and c["churn_reset"] == 1 and c["churn_ok"] == 38
    assert c["churn_handshakes_per_second"] == 19.5
    relay = result.details["components"]["relay"]
    assert (relay["reconnects"], relay["client_ids_seen"], relay["connects"], relay["errors"]) == (1, 2, 2, {"reset": 1})
    assert result.details["components"]["proctor-monitor"]["harness"] is True


def test_rejected_connections_over_the_limit_fail() -> None:
    h = healthy_history()
    valkey_sample(h, 4.0, received=90, rejected=7, cpu=2.0, clients={"web_1": [3]}, processes={"web_1": proc(1)})
    result = check_connections(h.ops, Ledgers(), STRICT)
    assert result.valid is False
    assert result.violations == ["rejected_over_limit"]
    assert result.counts["rejected_connections"] == 7
    assert result.examples["rejected_over_limit"][0]["limit"] == 0


def test_component_errors_over_the_limit_fail_and_name_the_component() -> None:
    h = healthy_history()
    valkey_sample(h, 4.0, received=90, clients={"web_2": [5]},
                  processes={"web_1": proc(1), "web_2": proc(12, max_clients=6, connect_timeout=2)})
    result = check_connections(h.ops, Ledgers(), STRICT)
    assert result.valid is False
    assert result.violations == ["component_errors_over_limit"]
    example = result.examples["component_errors_over_limit"][0]
    assert example["component"] == "web_2" and example["errors"] == 8 and example["by_kind"]["max_clients"] == 6


def test_a_connection_per_call_breaks_the_per_process_budget() -> None:
    """The fresh-connection anti-pattern: no errors, no rejections, but 96 handshakes from one process."""
    h = healthy_history()
    valkey_sample(h, 4.0, received=400, clients={"web_2": [77]},
                  processes={"web_2": proc(96), "worker_ai_1": proc(40, pids=30, max_process=4)})
    result = check_connections(h.ops, Ledgers(), STRICT)
    assert result.valid is False
    assert result.violations == ["process_connects_over_limit"]
    example = result.examples["process_connects_over_limit"]
    assert [e["component"] for e in example] == ["web_2"]  # 30 RQ horses opening 1-4 each are within it
    assert example[0]["max_process_connects"] == 96 and example[0]["limit"] == 20


def test_counters_survive_a_valkey_restart() -> None:
    assert counter_increase([2, 5, 1, 4]) == 2 + 3 + 1 + 3
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=5, rejected=2)
    valkey_sample(h, 2.0, received=9, rejected=0)  # restarted: counters from zero
    valkey_sample(h, 3.0, received=12, rejected=1)
    result = check_connections(h.ops, Ledgers(), CheckOptions(max_rejected_connections=2))
    assert result.counts["rejected_connections"] == 3 and result.valid is False


def test_failed_samples_still_carry_component_errors() -> None:
    """Valkey full (the sampler itself is rejected): the components' own counters still prove it."""
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=0, ok=False, processes={"relay": proc(30, max_clients=12)})
    result = check_connections(h.ops, Ledgers(), STRICT)
    assert result.valid is False
    assert result.counts["samples_failed"] == 1
    assert any("no valkey-sample could read Valkey" in n for n in result.notes)


def test_limits_without_samples_are_unknown_and_no_limits_only_measure() -> None:
    assert check_connections([], Ledgers(), STRICT).valid == UNKNOWN
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=0, ok=False)  # no counters either
    assert check_connections(h.ops, Ledgers(), CheckOptions(max_component_connection_errors=0)).valid == UNKNOWN
    plain = check_connections([], Ledgers(), CheckOptions())
    assert plain.valid is True and plain.notes == ["no valkey-sample in the history: connections were not measured"]


def test_harness_clients_never_count_against_component_limits() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=3, clients={"(unnamed)": [1, 2], "proctor-churn": [3]}, processes={"web_1": proc(1)})
    result = check_connections(h.ops, Ledgers(), CheckOptions(max_component_connection_errors=0))
    assert result.valid is True
    assert result.counts["unnamed_client_ids"] == 2 and result.counts["component_reconnects"] == 0


@pytest.mark.parametrize("value", [-1, 1.5, True, "0"])
def test_bad_limits_name_the_option(value: Any) -> None:
    with pytest.raises(OptionsError, match="max_rejected_connections"):
        CheckOptions.from_dict({"max_rejected_connections": value})
    assert CheckOptions.from_dict({"max_component_connection_errors": 3}).max_component_connection_errors == 3


# --- the figures, each after valid samples (mutation survivors of the first run) -----------------


def test_the_healthy_run_counts_only_its_valkey_samples_and_their_peak() -> None:
    c = check_connections(healthy_history().ops, Ledgers(), STRICT).counts
    # the churn sample and no other op is a valkey-sample; all of them read Valkey
    assert (c["samples"], c["samples_failed"], c["unnamed_client_ids"]) == (2, 0, 0)
    assert (c["handshakes_per_second_peak"], c["sampled_seconds"], c["max_connected_clients"]) == (30.0, 2.0, 3)


def test_counter_increase_counts_a_flat_counter_once() -> None:
    assert counter_increase([2, 2, 2]) == 2 and counter_increase([]) == 0.0


def test_a_restart_between_first_and_last_sample_counts_the_growth_on_both_sides() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=50, cpu=4.0)
    valkey_sample(h, 2.0, received=60, cpu=4.5)
    valkey_sample(h, 3.0, received=5, cpu=0.5)  # restarted: both counters start again below the first
    c = check_connections(h.ops, Ledgers(), CheckOptions()).counts
    # 10 before the restart and 5 after, over 2 s; CPU 0.5 s before and 0.5 s after
    assert (c["handshakes_per_second"], c["valkey_cpu_seconds"], c["valkey_cpu_percent"]) == (7.5, 1.0, 50.0)
    assert c["connections_received"] == 50 + 10 + 5 and c["handshakes_per_second_peak"] == 10.0


def test_a_restart_whose_counter_climbs_back_above_the_first_sample_is_not_undercounted() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=10, cpu=1.0)
    valkey_sample(h, 2.0, received=30, cpu=2.0)
    valkey_sample(h, 3.0, received=15, cpu=1.5)  # restarted, then 15 more: above the first sample's 10
    c = check_connections(h.ops, Ledgers(), CheckOptions()).counts
    assert (c["handshakes_per_second"], c["valkey_cpu_seconds"]) == (17.5, 2.5)  # (20 + 15) / 2 s; 1.0 + 1.5


def test_one_sample_gives_no_span_and_no_rate() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=10, cpu=1.0)
    c = check_connections(h.ops, Ledgers(), CheckOptions()).counts
    assert (c["sampled_seconds"], c["handshakes_per_second"], c["valkey_cpu_seconds"], c["valkey_cpu_percent"]) == (
        0.0, 0.0, 0.0, 0.0)


def test_short_spans_and_uneven_figures_are_rounded_as_documented() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=10, cpu=1.0)
    valkey_sample(h, 1.0, received=10, cpu=1.0)  # same instant: no rate from this pair
    valkey_sample(h, 1.2, received=11, cpu=1.0)
    h.op("monitor", "info", "valkey-sample", {"ok": True, "used_cpu_sys": 0.5, "used_cpu_user": 0.5}, at=1.25)  # no counter
    valkey_sample(h, 1.3, received=11, cpu=1.0 + 0.123456)
    c = check_connections(h.ops, Ledgers(), CheckOptions()).counts
    assert c["sampled_seconds"] == 0.3 and c["handshakes_per_second"] == 3.33  # 1 / 0.3 s
    assert c["handshakes_per_second_peak"] == 5.0  # 1 / 0.2 s; pairs with the counter-less sample give none
    assert (c["valkey_cpu_seconds"], c["valkey_cpu_percent"]) == (0.123, 41.2)


def test_a_failed_sample_before_good_ones_does_not_hide_them() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=0, ok=False)
    valkey_sample(h, 2.0, received=4, clients={"web_1": [3]}, processes={"web_1": proc(1), "relay": proc(2)})
    valkey_sample(h, 3.0, received=6, clients={"web_1": [3, 8]}, processes={"web_1": proc(2), "relay": proc(2)})
    result = check_connections(h.ops, Ledgers(), CheckOptions())
    web_1, relay = result.details["components"]["web_1"], result.details["components"]["relay"]
    assert (web_1["connections_now"], web_1["client_ids_seen"], web_1["reconnects"]) == (2, 2, 1)
    assert relay["connections_now"] == 0  # counted its own connections, never in CLIENT LIST


def test_a_churn_sample_without_ops_counts_none() -> None:
    h = healthy_history()
    h.op("monitor", "info", "churn-sample", {"outcomes": {}}, at=4.0)
    assert check_connections(h.ops, Ledgers(), CheckOptions()).counts["churn_ops"] == 0


def test_a_reconnecting_harness_client_is_not_a_component_reconnect() -> None:
    h = healthy_history()
    valkey_sample(h, 4.0, received=90, clients={"web_1": [3], "relay": [12], "proctor-monitor": [21]},
                  processes={"web_1": proc(1), "relay": proc(2, reset=1), "proctor-monitor": proc(9, reset=7)})
    result = check_connections(h.ops, Ledgers(), STRICT)
    assert result.valid is True
    assert (result.counts["component_reconnects"], result.counts["component_errors"]) == (1, 1)  # relay's only
    assert result.details["components"]["proctor-monitor"]["reconnects"] == 1


def test_render_details_draws_one_row_per_component_and_marks_the_harness() -> None:
    details = check_connections(healthy_history().ops, Ledgers(), STRICT).details
    lines = render_details(details)
    assert lines[:3] == ["", "| component | connections at end | client ids seen | reconnects (new ids) | connects (own count) "
                             "| connection errors | by kind | connection timeouts | events |",
                         "|---|---|---|---|---|---|---|---|---|"]
    assert lines[3:] == ["| proctor-monitor (harness) | 1 | 1 | 0 | 0 | 0 | - | 0 | - |",
                         "| relay | 1 | 2 | 1 | 2 | 1 | reset 1 | 0 | - |",
                         "| web_1 | 1 | 1 | 0 | 1 | 0 | - | 0 | - |"]
    assert render_details({}) == [] and render_details({"components": {}}) == []


def test_the_peak_rate_and_the_sampled_span_are_rounded_as_documented() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=10)
    valkey_sample(h, 1.3, received=11)  # 1 / 0.3 s
    valkey_sample(h, 1.323456, received=11)
    c = check_connections(h.ops, Ledgers(), CheckOptions()).counts
    assert (c["handshakes_per_second_peak"], c["sampled_seconds"]) == (3.33, 0.323)


def test_samples_without_cpu_or_client_figures_count_zero_for_them() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=10, cpu=0.5)
    h.op("monitor", "info", "valkey-sample", {"ok": True, "total_connections_received": 12}, at=2.0)  # INFO cut short
    c = check_connections(h.ops, Ledgers(), CheckOptions()).counts
    assert (c["valkey_cpu_seconds"], c["valkey_cpu_percent"], c["handshakes_per_second"]) == (0.0, 0.0, 2.0)
    h = HistoryBuilder()
    h.op("monitor", "info", "valkey-sample", {"ok": True, "total_connections_received": 3}, at=1.0)
    assert check_connections(h.ops, Ledgers(), CheckOptions()).counts["max_connected_clients"] == 0


def test_clients_seen_without_their_own_counters_cannot_judge_the_per_process_budget() -> None:
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=3, clients={"web_1": [3, 4]})  # CLIENT LIST only: no component counters
    result = check_connections(h.ops, Ledgers(), CheckOptions(max_connects_per_process=0))
    assert result.valid == UNKNOWN
    web_1 = result.details["components"]["web_1"]
    assert (web_1["processes"], web_1["max_process_connects"], web_1["connects"]) == (0, 0, 0)


def test_a_process_exactly_at_the_connect_budget_passes() -> None:
    h = healthy_history()
    valkey_sample(h, 4.0, received=90, clients={"web_2": [5]}, processes={"web_2": proc(20)})
    assert check_connections(h.ops, Ledgers(), STRICT).valid is True  # 20 == max_connects_per_process


def test_render_details_of_a_stored_report_with_missing_fields_shows_zeros() -> None:
    assert render_details({"components": {"relay": {}}})[3:] == ["| relay | 0 | 0 | 0 | 0 | 0 | - | 0 | - |"]


def test_events_are_summed_per_kind_over_the_components_and_never_judged() -> None:
    """A full Valkey's refusals, the limiter's fallbacks and the relay's failed passes are counted
    from the last sample's counters, harness clients left out; they never make a run invalid."""
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=5, clients={"web_1": [3]}, processes={"web_1": proc(1)})
    web = {**proc(1), "events": {"oom_refusals": 2, "limiter_fallbacks": 3}}
    relay = {**proc(1), "events": {"oom_refusals": 1, "relay_failed_passes": 4}}
    harness = {**proc(1), "events": {"oom_refusals": 50}}
    valkey_sample(h, 2.0, received=6, clients={"web_1": [3], "relay": [4]},
                  processes={"web_1": web, "relay": relay, "proctor-monitor": harness})
    result = check_connections(h.ops, Ledgers(), STRICT)
    assert result.valid is True, result
    assert (result.counts["oom_refusals"], result.counts["limiter_fallbacks"], result.counts["relay_failed_passes"]) \
        == (3, 3, 4)
    assert result.details["components"]["relay"]["events"] == {"oom_refusals": 1, "relay_failed_passes": 4}
    assert "oom_refusals 1, relay_failed_passes 4" in "\n".join(render_details(result.details))


def test_no_events_count_zero_not_missing() -> None:
    counts = check_connections(healthy_history().ops, Ledgers(), STRICT).counts
    assert (counts["oom_refusals"], counts["limiter_fallbacks"], counts["relay_failed_passes"]) == (0, 0, 0)


# --- the seed's connection timeouts: fresh vs pooled under one slow link (issue #25 item 4) ---------------
TIMEOUTS = CheckOptions(fresh_components=["web_1"], pooled_components=["web_2"], min_fresh_timeout_ratio=10)


def timed(connects: int, handshake: int = 0, connect: int = 0) -> dict[str, Any]:
    """A component's counters with ``handshake``/``connect`` connection timeouts."""
    phases = {k: v for k, v in {"handshake": handshake, "connect": connect}.items() if v}
    return {**proc(connects, connect_timeout=handshake + connect), "timeouts": phases,
            "timeout_total": handshake + connect}


def timeout_history(*later: dict[str, Any]) -> HistoryBuilder:
    """Valid samples first (fresh 30 vs pooled 2), then each of ``later`` as a further sample's counters."""
    h = HistoryBuilder()
    valkey_sample(h, 1.0, received=10, clients={"web_1": [3], "web_2": [4]},
                  processes={"web_1": timed(5), "web_2": timed(3)})
    valkey_sample(h, 3.0, received=90, clients={"web_1": [30], "web_2": [4, 5]},
                  processes={"web_1": timed(80, handshake=30), "web_2": timed(4, handshake=2)})
    for i, processes in enumerate(later):
        valkey_sample(h, 4.0 + i, received=100 + i, clients={"web_2": [4, 5]}, processes=processes)
    return h


def test_fresh_timeouts_ten_times_the_pooled_ones_pass_and_are_shown_beside_the_seeds() -> None:
    result = check_connections(timeout_history().ops, Ledgers(), TIMEOUTS)
    assert result.valid is True, result
    c = result.counts
    assert (c["fresh_timeouts"], c["pooled_timeouts"], c["pooled_connects"], c["component_timeouts"]) == (30, 2, 4, 32)
    assert c["pooled_timeouts_over_connects"] == 0 and c["fresh_timeouts_under_ratio"] == 0
    assert "fresh 30 >= 10 x max(1, pooled 2) = 20: held" in result.notes
    lines = "\n".join(render_details(result.details))
    assert "| fresh (measured) | web_1 | 30 (handshake 30) | 80 |" in lines
    assert "| pooled (measured) | web_2 | 2 (handshake 2) | 4 |" in lines
    assert "seed figure, not measured here" in lines and "2,854" in lines


def test_pooled_timeouts_near_the_fresh_ones_fail_the_ratio() -> None:
    # the negative control's shape: both nodes open a connection per call, so both time out alike
    h = timeout_history({"web_1": timed(80, handshake=30), "web_2": timed(70, handshake=25)})
    result = check_connections(h.ops, Ledgers(), TIMEOUTS)
    assert result.valid is False
    assert result.violations == ["fresh_timeouts_under_ratio"]
    assert result.examples["fresh_timeouts_under_ratio"][0] == {"fresh_timeouts": 30, "pooled_timeouts": 25,
                                                                 "needed": 250.0}


def test_a_pool_timing_out_more_often_than_it_opened_connections_fails_and_names_it() -> None:
    h = timeout_history({"web_1": timed(200, handshake=90, connect=30), "web_2": timed(4, handshake=5, connect=1)})
    result = check_connections(h.ops, Ledgers(), TIMEOUTS)
    assert result.valid is False
    assert result.violations == ["pooled_timeouts_over_connects"]
    assert result.examples["pooled_timeouts_over_connects"][0] == {"component": "web_2", "timeouts": 6, "connects": 4}


def test_no_fresh_timeouts_at_all_fail_even_with_none_pooled() -> None:
    # the slow link never made a handshake miss the timeout: nothing of the seed's symptom was reproduced
    h = timeout_history({"web_1": timed(80), "web_2": timed(4)})
    result = check_connections(h.ops, Ledgers(), TIMEOUTS)
    assert result.valid is False and result.violations == ["fresh_timeouts_under_ratio"]
    assert "fresh 0 >= 10 x max(1, pooled 0) = 10: failed" in result.notes


def test_a_group_without_counters_makes_the_ratio_unknown() -> None:
    h = timeout_history({"web_1": timed(80, handshake=30)})  # web_2 counted nothing in the last sample
    result = check_connections(h.ops, Ledgers(), TIMEOUTS)
    assert result.valid == UNKNOWN
    assert any("no connection counters from ['web_2']" in n for n in result.notes)


def test_the_ratio_must_be_at_least_one() -> None:
    with pytest.raises(OptionsError, match="min_fresh_timeout_ratio"):
        CheckOptions.from_dict({"min_fresh_timeout_ratio": 0.5})


@pytest.mark.parametrize("ratio", [1, 1.5, 10])
def test_a_ratio_of_one_or_more_is_accepted(ratio: float) -> None:
    assert CheckOptions.from_dict({"min_fresh_timeout_ratio": ratio}).min_fresh_timeout_ratio == ratio


@pytest.mark.parametrize("ratio", [True, "10", 0.99])
def test_a_ratio_that_is_not_a_number_of_at_least_one_is_refused(ratio: Any) -> None:
    with pytest.raises(OptionsError, match="min_fresh_timeout_ratio"):
        CheckOptions.from_dict({"min_fresh_timeout_ratio": ratio})


def test_fresh_timeouts_exactly_at_the_ratio_hold() -> None:
    h = timeout_history({"web_1": timed(80, handshake=30), "web_2": timed(4, handshake=3)})  # 30 = 10 x 3
    result = check_connections(h.ops, Ledgers(), TIMEOUTS)
    assert result.valid is True, result
    assert "fresh 30 >= 10 x max(1, pooled 3) = 30: held" in result.notes


def test_a_pool_with_as_many_timeouts_as_connections_it_opened_passes() -> None:
    # "at most as many timeouts as connections the pool opened": equal is allowed
    h = timeout_history({"web_1": timed(200, handshake=90), "web_2": timed(4, handshake=4)})
    result = check_connections(h.ops, Ledgers(), TIMEOUTS)
    assert result.valid is True, result
    assert result.counts["pooled_timeouts_over_connects"] == 0


@pytest.mark.parametrize("fresh, pooled", [([], ["web_2"]), (["web_1"], [])])
def test_a_ratio_with_only_one_group_named_is_unknown_not_a_verdict(fresh: list[str], pooled: list[str]) -> None:
    options = CheckOptions(fresh_components=fresh, pooled_components=pooled, min_fresh_timeout_ratio=10)
    result = check_connections(timeout_history().ops, Ledgers(), options)
    assert result.valid == UNKNOWN
    assert any("needs both fresh_components and pooled_components" in n for n in result.notes)


def test_counters_without_a_timeout_total_count_no_timeouts() -> None:
    h = healthy_history()
    valkey_sample(h, 4.0, received=80, clients={"web_1": [3]}, processes={"web_1": proc(2)})  # no timeout fields
    web_1 = check_connections(h.ops, Ledgers(), STRICT).details["components"]["web_1"]
    assert (web_1["timeout_total"], web_1["timeouts"]) == (0, {})


def test_a_component_without_a_connects_count_adds_none_to_its_group() -> None:
    from chaos.checkers.connections import timeout_rule

    counted = {"web_1": {"timeouts": {"handshake": 30}, "timeout_total": 30},  # a stats file without connects
               "web_2": {"connects": 4, "timeouts": {"handshake": 2}, "timeout_total": 2}}
    _bad, groups, unknown = timeout_rule(["web_1"], ["web_2"], 10, counted)
    assert unknown == [] and groups["fresh"]["connects"] == 0 and groups["pooled"]["connects"] == 4


def test_nothing_measured_is_not_applicable_and_anything_measured_is_judged() -> None:
    empty = check_connections(HistoryBuilder().ops, Ledgers(), CheckOptions())
    assert empty.valid is True and empty.na and "nothing to check" in empty.na
    measured = check_connections(healthy_history().ops, Ledgers(), STRICT)  # samples and counters
    assert measured.valid is True and measured.na is None
    h = HistoryBuilder()  # counters reach the checker only through samples, so one that failed carries them
    valkey_sample(h, 1.0, received=0, ok=False, processes={"web_1": proc(1)})
    counted_only = check_connections(h.ops, Ledgers(), CheckOptions())
    assert counted_only.na is None


def test_a_components_timeouts_are_shown_with_their_total_and_phases() -> None:
    lines = render_details({"components": {"web_1": {"timeouts": {"connect": 2, "handshake": 3}, "timeout_total": 5}}})
    assert "| 5 (connect 2, handshake 3) |" in lines[-1]
    assert "| 0 (connect 1) |" in render_details({"components": {"web_1": {"timeouts": {"connect": 1}}}})[-1]
