"""The wheel ships no tests (issue #20, item 7): setup.py's build_py drops every test module."""

from __future__ import annotations

import runpy
from pathlib import Path

from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: str) -> set[str]:
    build_py = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_under_test")["BuildPyWithoutTests"]
    command = build_py(Distribution({"name": "proctor", "script_name": "setup.py"}))
    return {module for _, module, _ in command.find_package_modules(package, str(ROOT / package.replace(".", "/")))}


def test_the_wheel_leaves_the_scenario_tests_out():
    modules = _modules("chaos")
    assert "pytest_plugin" in modules and "runner" in modules  # the harness itself ships
    assert not {module for module in modules if module.startswith("test_")}


def test_the_filter_sees_test_modules_at_all():
    # Negative control: without the filter the same folder has its scenario tests.
    from setuptools.command.build_py import build_py

    plain_command = build_py(Distribution({"name": "proctor", "script_name": "setup.py"}))
    plain = plain_command.find_package_modules("chaos", str(ROOT / "chaos"))
    assert any(module.startswith("test_") for _, module, _ in plain)
