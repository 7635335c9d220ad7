"""The errors a user can cause. Each carries one clear line: what is wrong, with which name, what is accepted.

Errors that belong to one part are defined beside it (a file name after the class); every one derives from
``HermesNBError``, so a front end (a magic, the CLI) shows any of them as one line. The whole tree
(``tests/unit/test_error_tree.py`` draws it from the source and compares)::

    HermesNBError
      ChatProgramError (frameworks/verifiers/chat_program.py)
      ChatTemplateError (env/chat_render.py)
        TemplateNotPrefixStable (env/episodes.py)
      ConfigError
        InvalidValueError
        LockedFieldError
        UnknownFieldError
      DiskFullError (system/disk.py)
      EnvironmentGone
        ServerError (frameworks/openenv/server.py)
      EnvironmentLoadError
        EnvironmentPythonError
      EpisodeError (env/episodes.py)
      InferenceError (env/inference_client.py)
        InferenceRequestRefused (env/inference_client.py)
      InferenceTestError (model_test/runner.py)
      JudgeError (env/judge.py)
      LaunchError
      ModelReferenceError (model_test/targets.py)
      NoEnvironmentSelectedError
      NoSamplesError (rollouts/reader.py)
      ProviderRefused (model_test/provider_client.py)
      RequestRejected (trajectory_api/state.py)
      RewardError (frameworks/openenv/rewards.py)
      RunStateError
      ServerStartError (inference/local.py)
      SessionError (frameworks/openenv/session.py)
        CapacityReached (frameworks/openenv/session.py)
        ConnectionLost (frameworks/openenv/session.py)
      TinkerError
      TokenizerUnavailable (env/text_tokens.py)
      TrajectoryAPIError
        TrajectoryAPIUnavailable
      TransferError
      UnknownEnvironmentError
        AmbiguousEnvironmentError
      UnknownRunError
      VerifiersEpisodeError (frameworks/verifiers/episode_env.py)
"""

from __future__ import annotations


class HermesNBError(Exception):
    """Base of every error hermes-nb raises for a user mistake or an expected failure."""


class UnknownEnvironmentError(HermesNBError):
    pass


class AmbiguousEnvironmentError(UnknownEnvironmentError):
    """A bare name that several listed environments share: the message lists each one's qualified name."""


class NoEnvironmentSelectedError(HermesNBError):
    pass


class EnvironmentLoadError(HermesNBError):
    """The environment's code could not be imported or its config read (raised in a child process)."""


class EnvironmentGone(HermesNBError):
    """The environment can serve no further group (a server it needs has died): the host ends the run at once,
    with this message, instead of counting groups that cannot succeed toward ``env.max_consecutive_failures``."""


class EnvironmentPythonError(EnvironmentLoadError):
    """The Python chosen to run an environment (``HERMES_NB_ENV_PYTHON``) is missing or lacks what the file needs."""


class ConfigError(HermesNBError):
    """An edit or a config file was refused; the config is unchanged."""


class UnknownFieldError(ConfigError):
    pass


class LockedFieldError(ConfigError):
    pass


class InvalidValueError(ConfigError):
    pass


class UnknownRunError(HermesNBError):
    pass


class RunStateError(HermesNBError):
    """The run is not in a state that allows the request (e.g. resuming a run that is still running)."""


class LaunchError(HermesNBError):
    """A process of a run failed to start; the message names it, the cause and its log file."""


class TransferError(HermesNBError):
    """A transfer-learning or resume input is unusable (missing path, other architecture, no trajectories)."""


class TinkerError(HermesNBError):
    """The Tinker backend cannot go on: no key, a model the server does not offer, an SDK the server does not
    speak, or a server that stayed unreachable; the message names the server URL (never the key)."""


class TrajectoryAPIError(HermesNBError):
    """The API refused a request or answered something that is not the protocol. ``status_code`` is the
    HTTP status (``None`` when the answer itself was malformed)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class TrajectoryAPIUnavailable(TrajectoryAPIError):
    """The API could not be reached (not started yet, stopped, or too slow to answer)."""
