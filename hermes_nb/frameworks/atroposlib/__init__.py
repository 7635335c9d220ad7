"""Environments written against atroposlib, run as they are.

Discovery marks a class whose ``BaseEnv`` is atroposlib's (``EnvironmentRef.framework == "atroposlib"``;
``adapter.py``). Such an environment runs in the *environment Python* (``interpreter``: ``HERMES_NB_ENV_PYTHON`` or
``%config HermesNB.env_python``, default hermes-nb's own interpreter, checked to import atroposlib before use),
because atroposlib pins its own stack and usually lives in a virtual environment of its own:

- selection reads its config there (``hermes_nb.selection.schema`` runs its child with that Python), and puts
  the run's defaults where atroposlib leaves ``batch_size``/``total_steps`` to the trainer (``sizes``);
- a run starts it there with atroposlib's own ``serve`` command (``serve``: the run's locked fields and
  ``total_steps``/``batch_size``/``group_size`` in the YAML file atroposlib's CLI reads), through ``bridge``, which
  adds what a hermes-nb run needs around atroposlib's loop without changing the environment's code: its
  ``wandb_log`` metrics in ``env_metrics.jsonl`` under the run's metric names (``metrics_map``), a final
  evaluation once the trainer's last step is taken, a clean disconnect, and a named failure when the environment's
  loop ends before the run's last step;
- ``rl_test_inference`` runs it there with atroposlib's own ``process`` command (``model_testing``: the settings for
  one model under test), through ``model_testing_bridge``, which writes each scored group as a row of the test's file.

``bridge``, ``model_testing_bridge`` and ``metrics_map`` run inside the environment Python: they import only the
standard library, pydantic and ``hermes_nb.protocol`` (and atroposlib), never the rest of hermes-nb; this
``__init__`` imports nothing, so running them imports no more.
"""
