"""Resource attribute names rltel writes and reads: one place for every stage."""

EXPERIMENT = "rltel.experiment"
TRIAL = "rltel.trial"
ROLE = "rltel.role"  # trainer, rollout or eval
RANK = "rltel.rank"
WORKER_ID = "rltel.worker_id"  # a rollout worker's id
STREAM = "rltel.stream"  # the snapshot's stream: train, rollout or eval

__all__ = ["EXPERIMENT", "RANK", "ROLE", "STREAM", "TRIAL", "WORKER_ID"]
