"""A user's project, as the trainer tests bring it: not MNIST, two named inputs (a dict of
features), a model compiled by its own function, input functions that shard by context."""
