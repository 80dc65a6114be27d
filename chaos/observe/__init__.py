"""What the harness samples beside the load: the stack's ``/metrics`` (``monitor``), Valkey's
own view of its connections (``valkey_stats``) and the lanes' job records from RQ (``lane_jobs``)."""
