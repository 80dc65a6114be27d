"""The shared look of the run plots (chaos/plots/style.py), and the rule that made it a module:
no module of the harness or the stack imports another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import chaos.plots.style as plot_style
from chaos.history import FaultWindow
from chaos.plots.style import no_data, shade_faults, titled_figure

REPO = Path(__file__).resolve().parents[2]
THIRD_PARTY_PRIVATE = {("rq.scripts", "_build_hset_args")}
"""rq's unique-enqueue script wants its argument packing; rq is pinned (pyproject.toml)."""


def test_the_module_exports_exactly_its_public_names() -> None:
    assert sorted(plot_style.__all__) == ["DPI", "END_OF_LOAD", "LANE_STYLES", "lane_style", "mark_end_of_load",
                                          "no_data", "shade_faults", "titled_figure"]


def test_fault_bands_run_to_the_end_when_unhealed_and_are_labelled_once() -> None:
    figure, axes = titled_figure("t", "x", "y")
    healed = FaultWindow("f1", "kill", "worker_merit_1", start=2.0, end=4.0)
    unhealed = FaultWindow("f2", "partition", "web_1", start=6.0, end=None)
    shade_faults(axes, [healed, unhealed], end=9.0)
    spans = [patch.get_x() for patch in axes.patches], [patch.get_width() for patch in axes.patches]
    assert spans == ([2.0, 6.0], [2.0, 3.0])
    assert [patch.get_label() for patch in axes.patches] == ["fault", None]  # one legend entry for all faults
    assert [text.get_text() for text in axes.texts] == [" kill worker_merit_1", " partition web_1"]
    assert (axes.get_title(), axes.get_xlabel(), axes.get_ylabel(), figure.dpi) == ("t", "x", "y", plot_style.DPI)


def test_an_empty_panel_says_no_data() -> None:
    _, axes = titled_figure("t", "x", "y")
    no_data(axes)
    assert [text.get_text() for text in axes.texts] == ["no data"]


def private_imports(source: str) -> list[tuple[str, str]]:
    """(module, name) of every ``from module import _name`` in ``source`` (dunders aside)."""
    return [(node.module or "", alias.name) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module != "__future__"
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_the_scan_sees_a_private_import_negative_control() -> None:
    assert private_imports("from chaos.plots.run import DPI, _shade\nfrom __future__ import annotations\n") == [
        ("chaos.plots.run", "_shade")]


def test_no_module_of_chaos_or_stack_imports_another_modules_private_names() -> None:
    found = {(str(path.relative_to(REPO)), module, name)
             for package in ("chaos", "stack") for path in sorted((REPO / package).rglob("*.py"))
             for module, name in private_imports(path.read_text()) if (module, name) not in THIRD_PARTY_PRIVATE}
    assert found == set()
