"""What every deployment of the stack shares, embedded or compose: the link table (``links``),
loopback ports (``ports``), run secrets and the roster (``secrets``), and the provisioning
command that writes them (``python -m stack.deploy.provision``). Nothing here starts a process."""

from __future__ import annotations

__all__ = ["StackError"]


class StackError(RuntimeError):
    """The stack could not start, stay up or stop; the message says what and why."""
