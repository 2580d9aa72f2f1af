"""``rltel demo``: a real multi-rank RL run through the whole pipeline (an example program).

``run`` trains the tiny MoE model (``model``) on gloo ranks; ``rollout`` holds the separate
rollout worker processes, ``collector`` the collector subprocess, ``progress`` the terminal
output, ``options`` and ``cli`` what to run.
"""

from rltel.demo.options import DemoOptions
from rltel.demo.run import DEMO_PEAK_FLOPS_PER_CORE, run_demo, train_rank

__all__ = ["DEMO_PEAK_FLOPS_PER_CORE", "DemoOptions", "run_demo", "train_rank"]
