"""What trains: the `--model` built and checked, its step and metrics, the built-in MNIST models."""

# `--model mlp` means `tfjob_trainer.model:mlp`, a path users may name too: the built-in models
# are two users of the `--model` interface.
from .builtin_models import cnn, mlp

__all__ = ["cnn", "mlp"]
