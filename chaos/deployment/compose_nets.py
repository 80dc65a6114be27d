"""The two /24 networks of a compose project: the project's own and the SMS egress one.

The engine refuses a network whose subnet overlaps one that exists, so two projects up at
the same time need prefixes of their own. One process brings up one project at a time; the
compose pass's pytest-xdist workers run side by side, so each worker shifts both prefixes
(``for_worker``, called by the root conftest.py).
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_EGRESS_NET", "DEFAULT_NET", "EGRESS_NET_ENV", "NET_ENV", "egress_net", "for_worker", "project_net"]

NET_ENV, EGRESS_NET_ENV = "PROCTOR_COMPOSE_NET", "PROCTOR_COMPOSE_EGRESS_NET"
DEFAULT_NET, DEFAULT_EGRESS_NET = "172.29.213", "172.29.214"  # the compose stack test uses .113, users .13


def project_net() -> str:
    return os.environ.get(NET_ENV, DEFAULT_NET)


def egress_net() -> str:
    return os.environ.get(EGRESS_NET_ENV, DEFAULT_EGRESS_NET)


def _shifted(prefix: str, by: int) -> str:
    *head, third = prefix.split(".")
    if len(head) != 2 or not third.isdigit() or not 0 <= int(third) + by <= 255:
        raise ValueError(f"compose network prefix {prefix!r} cannot be shifted by {by}: expected A.B.C, C + {by} <= 255")
    return ".".join([*head, str(int(third) + by)])


def for_worker(index: int) -> dict[str, str]:
    """Worker ``index``'s prefixes: the current ones (set or default) for worker 0, and two /24s
    further for each next worker, both networks moved together so no two workers' overlap."""
    return {NET_ENV: _shifted(project_net(), 2 * index), EGRESS_NET_ENV: _shifted(egress_net(), 2 * index)}
