"""A run: its parts built from the config, the collector and rollout buffer, the trainer (the
loop), evaluation episodes and evaluation during training, and torch.distributed."""
