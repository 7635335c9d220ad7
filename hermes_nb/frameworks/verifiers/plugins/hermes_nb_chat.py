"""The harness ``hermes_nb_chat``: verifiers' ``null`` chat loop in the environment's process (in_process_harness)."""

from hermes_nb.frameworks.verifiers.in_process_harness import InProcessChatHarness

__all__ = ["InProcessChatHarness"]
