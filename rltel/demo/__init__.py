"""``rltel demo``: a real multi-rank RL run through the whole pipeline (an example program).

``launch`` starts and stops its processes; ``run`` trains the tiny MoE model (``model``) on
gloo ranks; ``rollout`` holds the separate
rollout worker processes, ``collector`` the collector subprocess, ``progress`` the terminal
output, ``options`` and ``cli`` what to run.
"""

from rltel.demo.launch import run_demo
from rltel.demo.options import DemoOptions
from rltel.demo.run import DEMO_PEAK_FLOPS_PER_CORE, train_rank

__all__ = ["DEMO_PEAK_FLOPS_PER_CORE", "DemoOptions", "run_demo", "train_rank"]
