"""The engine figures bridged from a scraped vLLM or SGLang exposition land in SwanLab's
local files at the training steps the collector aligned them to, read back with SwanLab's
own backup reader (beside test_scrape_e2e's TensorBoard and W&B read-backs).

The engine endpoints serve vLLM's (commit 005a810b) and SGLang's (commit 93d04878) metric
definitions (see engines.py).
"""

from __future__ import annotations

import pytest

from tests.collector.test_runs import swanlab_series  # skips the module without swanlab
from tests.collector.test_scrape_e2e import scrape_between_steps

from .engines import Engine


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_engine_figures_land_in_swanlab_at_the_latest_training_step(
    start_collector, tmp_path, kind
):
    files = tmp_path / "files"
    collector = start_collector(sinks={"fileroot": str(files), "swanlab": {"mode": "offline"}})
    instance = scrape_between_steps(collector, Engine(kind))
    collector.stop(60)  # SwanLab's run finished: its backup file complete
    figure = f"rollout_engine/instance_{instance}/"
    swanlog = str(files / "exp" / "t1" / "swanlog")
    name, running = swanlab_series(swanlog, figure + "running_requests")
    assert name == "exp_t1"
    assert running == {0: 1.0, 1: 2.0, 3: 3.0}
    assert swanlab_series(swanlog, figure + "waiting_requests")[1] == {0: 0.0, 1: 7.0, 3: 7.0}
    assert swanlab_series(swanlog, figure + "kv_cache_usage")[1] == {0: 0.0, 1: 0.0, 3: 0.875}
    assert swanlab_series(swanlog, "train/loss")[1] == pytest.approx({1: 1.0, 2: 0.5, 3: 1 / 3})
