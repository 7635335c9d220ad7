"""The trainer's run: the loop, its checkpoints, the API registration, the process's run."""
