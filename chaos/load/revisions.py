"""Students who change their minds: autosaved answer revisions, some sent twice, some
concurrently, some held back and delivered late, with reads of the current answers.

Per question a student writes revisions 1..n (n = 1, or 2..``max_revisions`` for a
revised question), each under its own Idempotency-Key, and the client retries an
unknown outcome under the same key (chaos/load/client.py). On purpose:

- **concurrent**: the last two revisions go out at once, on separate connections (one
  keep-alive connection never reorders); latency/jitter toxics on the ``web_N`` links
  let the later one overtake the earlier;
- **delayed**: revision n-1 is held back and sent only after revision n was
  acknowledged, as a slow autosave would arrive: the stack must log it and acknowledge
  it as superseded, never make it current;
- **duplicate**: an acknowledged revision is sent again under the same key (a replay),
  its invoke marked ``deliberate_duplicate`` (chaos/history.py) so it is not counted as a retry;
- **read**: after each question, and before finishing, the student reads the attempt's
  current answers (``GET /v1/attempts/{id}/answers``).

Every random choice comes from the student's seeded ``rng``.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, replace

from chaos.load.client import CallResult, ExamClient
from chaos.history import DELIBERATE_DUPLICATE
from chaos.ops.revisions import read_call, revise_call
from stack.ledger.grading import OPTIONS

__all__ = ["RevisionSpec", "revise_answers"]


@dataclass(frozen=True)
class RevisionSpec:
    revised_share: float = 0.75  # questions revised more than once
    max_revisions: int = 4
    concurrent_share: float = 0.5  # revised questions whose last two revisions are sent at once
    delayed_share: float = 0.5  # revised questions whose revision n-1 arrives after n was acknowledged
    duplicate_share: float = 0.25  # acknowledged revisions sent again under the same key

    def __post_init__(self) -> None:
        for name in ("revised_share", "concurrent_share", "delayed_share", "duplicate_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"revision option {name} must be within 0..1, got {getattr(self, name)!r}")
        if self.max_revisions < 2:
            raise ValueError(f"revision option max_revisions must be >= 2, got {self.max_revisions!r}")


@dataclass
class _Plan:
    """What one question's revisions do: which go out together, which is held back."""

    contents: list[str]
    concurrent: bool
    delayed: bool

    @property
    def revisions(self) -> int:
        return len(self.contents)


def _plan(spec: RevisionSpec, rng: random.Random) -> _Plan:
    count = rng.randint(2, spec.max_revisions) if rng.random() < spec.revised_share else 1
    contents = [rng.choice(OPTIONS) for _ in range(count)]
    return _Plan(contents, concurrent=count >= 2 and rng.random() < spec.concurrent_share,
                 delayed=count >= 2 and rng.random() < spec.delayed_share)


class _Student:
    def __init__(self, client: ExamClient, spec: RevisionSpec, rng: random.Random, auth: dict[str, str],
                 attempt_id: str) -> None:
        self.client, self.spec, self.rng, self.auth, self.attempt_id = client, spec, rng, auth, attempt_id

    async def send(self, question: str, revision: int, content: str, key: str | None = None) -> CallResult:
        """One revision on its own process (so concurrent sends never share one)."""
        key = key or f"rev-{uuid.UUID(int=self.rng.getrandbits(128)).hex}"
        call = revise_call(self.attempt_id, question, revision, content, key, self.auth)
        result = await self.client.call(self.client.history.new_process(), call)
        if result.type == "ok" and self.rng.random() < self.spec.duplicate_share:
            again = replace(call, value={**call.value, DELIBERATE_DUPLICATE: 1})  # not a retry: stats tells them apart
            await self.client.call(self.client.history.new_process(), again)  # sent twice: a replay
        return result

    async def read(self) -> bool:
        result = await self.client.call(self.client.history.new_process(), read_call(self.attempt_id, self.auth))
        return result.type == "ok"

    async def question(self, question: str, plan: _Plan) -> bool:
        held = plan.revisions - 1 if plan.delayed else None  # revision number held back, 1-based
        order = [n for n in range(1, plan.revisions + 1) if n != held]
        together = order[-2:] if plan.concurrent and len(order) >= 2 else []
        for number in order[: len(order) - len(together)]:
            if (await self.send(question, number, plan.contents[number - 1])).type != "ok":
                return False
        if together:
            sent = await asyncio.gather(*(self.send(question, n, plan.contents[n - 1]) for n in together))
            if any(result.type != "ok" for result in sent):
                return False
        if held is not None and (await self.send(question, held, plan.contents[held - 1])).type != "ok":
            return False
        return await self.read()


async def revise_answers(
    client: ExamClient, spec: RevisionSpec, rng: random.Random, auth: dict[str, str], attempt_id: str,
    questions: list[str],
) -> bool:
    """Write every question's revisions and read back after each; False at the first
    definite failure or exhausted retries (the student gives up, like student_flow)."""
    student = _Student(client, spec, rng, auth, attempt_id)
    for question in questions:
        if not await student.question(question, _plan(spec, rng)):
            return False
    return True
