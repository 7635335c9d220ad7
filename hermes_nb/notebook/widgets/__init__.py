"""Widgets of the notebook layer: environment picker, config form, run monitor."""
