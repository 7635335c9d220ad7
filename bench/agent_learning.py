"""Does an agent learn? Held-out episode success of ``calculator_agent`` on the embedded chat model, within 10 min.

The agent config (``configs/agent.yaml``: environment ``calculator_agent``, two-step word problems solved with a
``calculate`` tool in multi-turn episodes, on ``embedded-chat``) through ``rl_start_training``, once per seed, on
the same clock as ``bench/learning.py`` (t = 0 at the first trainer step; evaluation pauses are charged). Target
(issue 14): +20 points of held-out success within 600 s of training, 3 of 3 seeds; the start success and the
per-step time are printed with each seed.

    .venv/bin/python bench/agent_learning.py [--seeds 0 1 2] [--budget 600] [--set NAME=VALUE ...] [--write]
"""

from __future__ import annotations

from learning import ROOT, LearningBench, main

AGENT_BENCH = LearningBench(
    environment="calculator_agent",
    config=ROOT / "configs" / "agent.yaml",
    target_lift=0.20,
    budget_s=600.0,
    heading="## Agent learning",
    intro=(
        "`bench/agent_learning.py`: `configs/agent.yaml` (`calculator_agent`: multi-turn episodes with a\n"
        "`calculate` tool, on the embedded chat model `embedded-chat`) through `rl_start_training`, one run per\n"
        "seed. Time 0 is the first trainer step; evaluation pauses are charged. Target (issue 14): +20 points of\n"
        "held-out episode success within 600 s on two cores, 3 of 3 seeds.\n"
    ),
    script="bench/agent_learning.py",
)

if __name__ == "__main__":
    main(AGENT_BENCH, __doc__)
