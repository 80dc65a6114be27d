"""The seed's Locust ramp (``proctor ramp``, loadtests/exam_ramp.py): the command and the
finalize step (``command``), the merge of the Locust processes' histories (``merge``), the load
gate (``gate``) and the ramp's report (``report``). ``python -m chaos.ramp finalize RUN_DIR``."""
