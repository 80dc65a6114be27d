"""Integration tests share the unit tests' loopback helpers (netsupport: free_port, REPO), on the
path through pyproject.toml's ``pythonpath``."""
