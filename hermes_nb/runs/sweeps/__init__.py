"""Sweeps: a grid of config overrides run as normal runs by a detached driver; their ``rl_*`` commands."""
