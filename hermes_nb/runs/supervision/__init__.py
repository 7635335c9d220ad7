"""Supervision of a run: the detached supervisor and its warm starts, the forms of the trajectory API it trains
from, ports, the stop and its grace periods, ``run.json``'s writer and reconciling, and what is wrong with a
run's files."""
