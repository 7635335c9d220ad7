"""The local torch backend: the backend itself, packed steps, which base models train, the memory model of a run."""
