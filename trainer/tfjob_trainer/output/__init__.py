"""What a task writes: checkpoints, TensorBoard summaries, progress lines, its export and result."""
