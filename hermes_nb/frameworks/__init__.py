"""Environment frameworks: what an environment is written against, and how a run reads, serves and tests it.

``contract.py`` is what an adapter provides; ``registry.py`` lists the adapters (hermes-nb's own, atroposlib's,
OpenEnv's, verifiers', and any registered from outside the package); ``side_framework.py`` is the base of an
adapter whose environments run in a Python of their own. Every other module asks the adapter of an environment's
framework and never branches on a framework's name.
"""
