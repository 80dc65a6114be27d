"""Run plots, one module per figure family: ``run`` (throughput, latency, queues), ``digest``
(the exam digest's series), ``ai_lane`` (the AI lane); ``style`` is the look they share."""
