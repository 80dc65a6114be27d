"""The AI narrative lane under provider pressure (issue #11): a shared limiter on Valkey's
clock, retries by class with a deadline, billing reservations, lane pause and alerts.
See docs/ai-lane.md."""
