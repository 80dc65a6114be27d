"""The SMS worker's side of egress: which address it sends from, and the standby's wait.

Read from the attachment record the deployment writes (stack/deploy/egress.py) on every
SMS job, so a worker that was handed the reserved address sends from it on its next job,
and one that lost it stops at once. Without ``PROCTOR_EGRESS_ATTACHMENT`` (every other
stack) nothing here applies: the OS picks the source address and every SMS worker serves.
"""

from __future__ import annotations

import logging
import threading

from stack.config import Settings
from stack.deploy.egress import read_attachment

__all__ = ["STANDBY_POLL", "holds_lane", "source_address", "wait_for_lane"]

STANDBY_POLL = 0.05
"""How often a standby reads the attachment (real seconds): part of the measured failover."""

log = logging.getLogger("proctor.egress")


def source_address(settings: Settings) -> str | None:
    """The local address this worker's SMS requests bind to; None = the OS default."""
    if not settings.egress_attachment:
        return settings.egress_host or None
    attachment = read_attachment(settings.egress_attachment)
    if attachment is None:
        return settings.egress_host or None
    return attachment.source_for(settings.component, settings.egress_host) or None


def holds_lane(settings: Settings) -> bool:
    if not settings.egress_attachment:
        return True
    attachment = read_attachment(settings.egress_attachment)
    return attachment is not None and attachment.lane_holder == settings.component


def wait_for_lane(settings: Settings, stop: threading.Event) -> bool:
    """A standby blocks here (alive, ready, taking no job) until the deployment hands it the
    lane; False when ``stop`` was set first (before the call too: a SIGTERM during start-up)."""
    if stop.is_set():
        return False
    if holds_lane(settings):
        return True
    log.info("%s: standby on %s, waiting for the SMS lane", settings.component, settings.egress_host or "(any)")
    while not stop.wait(STANDBY_POLL):
        if holds_lane(settings):
            log.info("%s: took the SMS lane", settings.component)
            return True
    return False
