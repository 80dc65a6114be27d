"""Only what pyproject.toml cannot say: the wheel ships no test modules.

The scenario tests live beside the harness (``pytest chaos/`` runs them from a checkout), and
setuptools packs every module of a package; ``exclude-package-data`` filters data files only.
"""

from fnmatch import fnmatch

from setuptools import setup
from setuptools.command.build_py import build_py

TEST_MODULES = "test_*"


class BuildPyWithoutTests(build_py):
    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [(pkg, module, path) for pkg, module, path in modules if not fnmatch(module, TEST_MODULES)]


if __name__ == "__main__":  # setuptools' backend runs this file as __main__; a test imports it
    setup(cmdclass={"build_py": BuildPyWithoutTests})
