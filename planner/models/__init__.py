"""Models: the transformer shape, config.json readers, presets, the size rule, counts."""
