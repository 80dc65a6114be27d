"""What the harness sends: the HTTP client that writes the history (``client``), the exam
workload (``exam``), answer revisions (``revisions``), TLS connection churn against Valkey
(``churn``) and the CPU hog of ``proctor sweep --stress`` (``stress``)."""
