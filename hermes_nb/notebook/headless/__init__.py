"""The headless runner of ``make main`` (``scripts/main_job.py``): a notebook executed without a browser
(``execution.py``) and the progress of the runs it starts, drawn on a terminal or a log (``terminal_progress.py``)."""
