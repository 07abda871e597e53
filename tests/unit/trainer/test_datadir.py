"""`tfjob_trainer.datadir`: the users' path to the helpers of `data.datadir`."""

from __future__ import annotations

from tfjob_trainer import plugins
from tfjob_trainer.data import datadir


def test_users_reach_the_helpers_at_tfjob_trainer_datadir():
    """`from tfjob_trainer import datadir` and `--input tfjob_trainer.datadir:tfrecords` are
    users' paths: they name every public helper of `data.datadir`, the same objects."""
    from tfjob_trainer import datadir as public

    defined = {
        name
        for name, value in vars(datadir).items()
        if not name.startswith("_")
        and (name.isupper() or getattr(value, "__module__", None) == datadir.__name__)
    }
    assert set(public.__all__) == defined
    assert all(getattr(public, name) is getattr(datadir, name) for name in defined)
    assert plugins.load("input", "tfjob_trainer.datadir:tfrecords") is datadir.tfrecords
