"""Per-GPU training memory: model states, activations, precision recipes, the peak."""
