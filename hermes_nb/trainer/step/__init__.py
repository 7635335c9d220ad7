"""What a training step computes: advantages, a batch into datums, the loss and its settings, the teacher term,
the learning-rate schedule, a batch's own figures."""
