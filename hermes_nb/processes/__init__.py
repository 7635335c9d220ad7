"""The process entry points that assemble parts from the floors below: the trainer (``trainer.py``) and the
standalone inference server (``inference_server.py``), each run as ``python -m hermes_nb.processes.NAME``."""
