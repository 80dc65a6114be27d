"""Reports for a browser: ``report.html`` per run (page.py) and ``proctor serve`` (serve.py)."""
