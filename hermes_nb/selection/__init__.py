"""Choosing what to train: discover environments (AST scan), read a chosen one's config schema in a child
process, validate edits against it, and keep the selection and current config in ``<home>/session.json``."""
