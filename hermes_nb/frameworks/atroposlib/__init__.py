"""Environments written against atroposlib, run as they are: ``adapter.py`` (the parts it uses are in
``hermes_nb.atropos``, the modules that run inside the environment Python among them)."""
