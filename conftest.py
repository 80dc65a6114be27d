# The chaos plugin (chaos/pytest_plugin.py) comes from the `pytest11` entry point in pyproject.toml,
# as in a user's repo: not loaded here (that would register it twice).
# pytester (tests/plugin) must be named in the top-level conftest: pytest refuses `pytest_plugins` lower down.
pytest_plugins = ["pytester"]
