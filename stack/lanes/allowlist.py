"""The only job functions a worker runs, checked before anything is imported or unpickled.

RQ imports whatever dotted path a job names (``os.system`` included) and, with its default
serializer, unpickles the job's data, which runs code on its own. Anyone holding a
credential that may enqueue (the web nodes, the relay) could therefore run code in a
worker. So:
- every job of the project is JSON (``JOB_SERIALIZER``): decoding a job runs nothing;
- a worker checks the decoded function name against ``ALLOWED_FUNCTIONS`` and refuses
  callbacks and webhooks (RQ would import or call those too) *before* it forks a horse;
- a refused job never runs: it is taken off the lane into the failed registry, counted in
  ``REFUSED_JOBS_KEY`` (the web nodes' /metrics: ``proctor_refused_jobs_total``) and logged.
"""

from __future__ import annotations

from typing import Any

from stack.lanes.queues import JOB_FUNCTION, JOB_SERIALIZER

__all__ = ["ALLOWED_FUNCTIONS", "JOB_SERIALIZER", "NOOP_JOB", "noop", "refusal"]

NOOP_JOB = "stack.lanes.allowlist.noop"
"""A job that does nothing: loadtests/bench_lanes.py times RQ's own overhead with it."""

ALLOWED_FUNCTIONS = frozenset({*JOB_FUNCTION.values(), NOOP_JOB})


def noop(tag: str = "") -> str:
    """Returns its argument: RQ's enqueue -> start -> end cost with no work in between."""
    return tag


def refusal(job: Any) -> str | None:
    """Why ``job`` must not run, or None. Reads only decoded JSON fields; imports nothing."""
    try:
        name = job.func_name
    except Exception:  # noqa: BLE001 - pickle, garbage: any decoding failure is a refusal
        return "its data is not a JSON job (undecodable)"
    if name not in ALLOWED_FUNCTIONS:
        return f"function {str(name)[:80]!r} is not an allowed job function"
    hooks = [attr for attr in ("_success_callback_name", "_failure_callback_name", "_stopped_callback_name")
             if getattr(job, attr, None)]
    if hooks or getattr(job, "webhooks", None):
        return "it names callbacks or webhooks, which the project's jobs never do"
    return None
