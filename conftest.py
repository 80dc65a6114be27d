# The chaos plugin gives every pytest run in this repo the --chaos-* options and fixtures.
pytest_plugins = ["chaos.pytest_plugin"]
