"""The history's op schemas, one module per kind of op, shared by whoever writes the op
(workloads, the Locust student) and whoever reads it back (the checkers)."""
