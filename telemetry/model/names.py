"""Resource attribute names (and the closed marker) rltel writes and reads: one place for
every stage."""

EXPERIMENT = "rltel.experiment"
TRIAL = "rltel.trial"
ROLE = "rltel.role"  # trainer, rollout or eval
RANK = "rltel.rank"
WORKER_ID = "rltel.worker_id"  # a rollout worker's id
STREAM = "rltel.stream"  # the snapshot's stream: train, rollout or eval
CLOSED_METRIC = "rltel/closed"  # a gauge, 1 in a trainer's last snapshot (its logger closed)
STEP_METRIC = "rltel/step"  # a gauge of the committed global_step in every trainer export

__all__ = [
    "CLOSED_METRIC",
    "EXPERIMENT",
    "RANK",
    "ROLE",
    "STEP_METRIC",
    "STREAM",
    "TRIAL",
    "WORKER_ID",
]
