"""Faults and the nemesis protocol.

A nemesis knows how to start and end some kinds of fault and how to heal
everything it ever did. ``heal`` must be idempotent and always runs at the end of
a scenario, whatever happened — Chaos Toolkit's rollbacks that skip on failure
are the thing not to copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["FaultSpec", "Nemesis", "NemesisError", "CompositeNemesis"]


class NemesisError(RuntimeError):
    """A fault could not be started: an unknown kind or target, named in the message."""


@dataclass(frozen=True)
class FaultSpec:
    at: float  # seconds after the load starts
    kind: str  # kill | pause | restart | scale | toxic | provider
    target: str  # component or link name
    duration: float  # seconds until the fault ends (a killed component is restarted then)
    params: dict[str, Any] = field(default_factory=dict)
    # Faults naming the same group never overlap (chaos/nemesis/runner.py), whatever their targets: a kill
    # of the second web node waits until the first is back, so the pool always keeps a node serving,
    # however long a slow machine takes to restart one.
    exclusive: str = ""
    # The index, in the schedule, of a fault this one must land inside (chaos/nemesis/runner.py): it
    # starts ``at - inside.at`` after that fault's start returned, and that fault lasts until
    # ``inside.at + inside.duration - at`` after this one's start returned. The schedule's offsets
    # hold however late a loaded machine runs either call, never only on an idle one.
    inside: int | None = None

    def as_dict(self) -> dict[str, Any]:
        group = {"exclusive": self.exclusive} if self.exclusive else {}
        inside = {} if self.inside is None else {"inside": self.inside}
        return {"at": self.at, "kind": self.kind, "target": self.target, "duration": self.duration,
                **group, **inside, **self.params}


class Nemesis(Protocol):
    kinds: frozenset[str]

    def start(self, fault: FaultSpec) -> dict[str, Any]:
        """Inject the fault; return details worth logging (pids killed, whether a job was running)."""

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        """Undo this one fault."""

    def heal(self) -> None:
        """Undo every fault ever started; idempotent."""


class CompositeNemesis:
    """Routes each fault to the nemesis that handles its kind."""

    def __init__(self, *members: Nemesis) -> None:
        self.members = members
        self.kinds = frozenset(kind for member in members for kind in member.kinds)

    def _member(self, fault: FaultSpec) -> Nemesis:
        for member in self.members:
            if fault.kind in member.kinds:
                return member
        raise NemesisError(f"no nemesis handles fault kind {fault.kind!r}; known: {sorted(self.kinds)}")

    def start(self, fault: FaultSpec) -> dict[str, Any]:
        return self._member(fault).start(fault)

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        return self._member(fault).end(fault)

    def heal(self) -> None:
        errors = []
        for member in self.members:
            try:
                member.heal()
            except Exception as exc:  # noqa: BLE001 - every member heals even if one fails
                errors.append(f"{type(member).__name__}: {exc}")
        if errors:
            raise NemesisError("heal failed: " + "; ".join(errors))
