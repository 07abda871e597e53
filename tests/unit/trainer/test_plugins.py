"""Users' functions: the key=value arguments and the signature checks. (The memory arithmetic
that decides whether a model fits the parameter servers: runtime/test_memory.py.)"""

from __future__ import annotations

import pytest

from tfjob_trainer import UsageError, options, plugins


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        (["units=64"], {"units": 64}),
        (["rate=0.1", "name=wide"], {"rate": 0.1, "name": "wide"}),
        (["shuffle=true", "sizes=[64,32]"], {"shuffle": True, "sizes": [64, 32]}),
        (["path=/data/a=b"], {"path": "/data/a=b"}),
        (["empty="], {"empty": ""}),
        ([], {}),
    ],
)
def test_arguments_parse_as_json_or_stay_strings(pairs, expected):
    assert plugins.parse_args("model-arg", pairs) == expected


@pytest.mark.parametrize("pair", ["units", "=3", "two words=1", "1x=2"])
def test_an_argument_that_is_no_pair_is_refused_in_one_line(pair):
    with pytest.raises(UsageError, match=r"^--model-arg .*expected key=value"):
        plugins.parse_args("model-arg", [pair])


def test_env_pairs_are_space_separated(monkeypatch):
    monkeypatch.setenv("TFJOB_MODEL_ARG", "units=8 learning_rate=0.5")
    monkeypatch.setenv("TFJOB_INPUT_ARG", "size=100")
    opts = options.parse(["--model", "tests.unit.trainer.test_plugins:model_fn"])
    assert opts.model_args == {"units": 8, "learning_rate": 0.5}
    assert opts.input_args == {"size": 100}
    # Flags replace the environment's pairs.
    assert options.parse(["--model-arg", "units=2"]).model_args == {"units": 2}


def model_fn(*, units: int = 4, learning_rate: float = 0.1) -> tuple[int, float]:
    return units, learning_rate


def input_fn(ctx, *, batch_size: int, data_dir: str | None = None, size: int = 10):
    return ctx, batch_size, data_dir, size


def needs_vocabulary(ctx, *, vocabulary: str):
    return vocabulary


def takes_anything(ctx, **kwargs):
    return kwargs


def no_context(*, batch_size: int):
    return batch_size


HERE = "tests.unit.trainer.test_plugins"


@pytest.mark.parametrize(
    ("spec", "given", "offered", "positional", "called", "expected"),
    [
        # Offered values go where the function has a parameter for them; given ones win.
        (f"{HERE}:model_fn", {}, {"learning_rate": 0.5, "hidden_units": 9}, 0, (), (4, 0.5)),
        (f"{HERE}:model_fn", {"learning_rate": 0.2}, {"learning_rate": 0.5}, 0, (), (4, 0.2)),
        (
            f"{HERE}:input_fn",
            {"size": 3},
            {"batch_size": 8, "data_dir": "/d"},
            1,
            ("ctx",),
            ("ctx", 8, "/d", 3),
        ),
        (
            f"{HERE}:takes_anything",
            {"a": 1},
            {"batch_size": 8},
            1,
            ("c",),
            {"a": 1, "batch_size": 8},
        ),
    ],
)
def test_bound_functions_get_what_they_take(spec, given, offered, positional, called, expected):
    plugin = plugins.bind("input", spec, given, offered=offered, positional=positional)
    assert plugin(*called) == expected


def test_a_shared_argument_goes_only_to_a_function_that_names_it():
    """--input-arg serves --input and --eval-input: the evaluation's takes what it names."""
    plugin = plugins.bind(
        "eval-input",
        f"{HERE}:input_fn",
        {"size": 3, "shuffle": 100},
        offered={"batch_size": 8},
        positional=1,
        shared=True,
    )
    assert plugin("ctx") == ("ctx", 8, None, 3)
    with pytest.raises(UsageError, match="takes no argument 'shuffle'"):
        plugins.bind("input", f"{HERE}:input_fn", {"shuffle": 100}, positional=1)


@pytest.mark.parametrize(
    ("spec", "given", "positional", "says"),
    [
        ("nosuchpkg.mod:f", {}, 0, "--input nosuchpkg.mod:f: no module named 'nosuchpkg'"),
        (f"{HERE}:nothing", {}, 0, f"--input {HERE}:nothing: {HERE} has no 'nothing' (it has: "),
        (f"{HERE}:HERE", {}, 0, "HERE is a str, not a function"),
        ("justamodule", {}, 0, "expected package.module:function"),
        (
            f"{HERE}:input_fn",
            {"sise": 3},
            1,
            f"--input-arg sise=...: {HERE}:input_fn takes no argument 'sise' (it takes: "
            "batch_size, data_dir, size)",
        ),
        (
            f"{HERE}:needs_vocabulary",
            {},
            1,
            f"--input {HERE}:needs_vocabulary: no value for its argument(s) vocabulary "
            "(--input-arg vocabulary=...)",
        ),
        (
            f"{HERE}:no_context",
            {},
            1,
            "it must take a tf.distribute.InputContext as its first argument",
        ),
    ],
)
def test_a_function_that_cannot_be_called_as_given_is_refused(spec, given, positional, says):
    with pytest.raises(UsageError) as e:
        plugins.bind(
            "input", spec, given, offered={"batch_size": 8}, positional=positional,
            args_flag="input-arg",
        )  # fmt: skip
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", sorted(plugins.BUILTIN_MODELS))
def test_the_built_in_models_are_at_their_public_path(name):
    """`--model mlp` is `tfjob_trainer.model:mlp`, a path users may name themselves."""
    from tfjob_trainer.model import builtin_models

    assert plugins.load("model", plugins.BUILTIN_MODELS[name]) is getattr(builtin_models, name)
