"""`tfjob_trainer.datadir`: the users' path to the helpers of `data.file_inputs`."""

from __future__ import annotations

from tfjob_trainer import plugins
from tfjob_trainer.data import file_inputs


def test_users_reach_the_helpers_at_tfjob_trainer_datadir():
    """`from tfjob_trainer import datadir` and `--input tfjob_trainer.datadir:tfrecords` are
    users' paths: they name every public helper of `data.file_inputs`, the same objects."""
    from tfjob_trainer import datadir as public

    defined = {
        name
        for name, value in vars(file_inputs).items()
        if not name.startswith("_")
        and (name.isupper() or getattr(value, "__module__", None) == file_inputs.__name__)
    }
    assert set(public.__all__) == defined
    assert all(getattr(public, name) is getattr(file_inputs, name) for name in defined)
    assert plugins.load("input", "tfjob_trainer.datadir:tfrecords") is file_inputs.tfrecords
