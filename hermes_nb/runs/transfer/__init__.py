"""What a run starts from: the checkpoints, weights and trajectories of earlier runs (resume, transfer, replay),
and the lineage of a run resumed from another."""
