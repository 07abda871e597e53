"""Users' functions: the key=value arguments, the signature checks, and the memory arithmetic
that decides whether a model fits the parameter servers."""

from __future__ import annotations

import pytest

from tfjob_trainer import UsageError, options, plugins
from tfjob_trainer.runtime import memory


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
    opts = options.parse(["--model", "tests.unit.test_trainer_plugins:model_fn"])
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


HERE = "tests.unit.test_trainer_plugins"


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
    from tfjob_trainer.model import mnist

    assert plugins.load("model", plugins.BUILTIN_MODELS[name]) is getattr(mnist, name)


@pytest.mark.parametrize(
    ("sizes", "shards", "expected"),
    [([4, 1, 2, 8], 2, [6, 9]), ([4, 1, 2], 1, [7]), ([5], 3, [5, 0, 0])],
)
def test_variables_go_round_robin_as_parameter_server_strategy_places_them(sizes, shards, expected):
    assert memory.placement(sizes, shards) == expected


def test_a_share_past_the_free_memory_is_refused_naming_the_ps_and_largest_variable():
    mib = 2**20
    budgets = {0: memory.Budget(limit=1000 * mib, used=400 * mib), 1: memory.Budget(2000 * mib, 0)}
    sizes, names = [500 * mib, 10 * mib, 20 * mib], ["emb", "bias", "out"]
    with pytest.raises(UsageError) as e:
        memory.check(sizes, names, budgets, 2, "--model m:f")
    text = str(e.value)
    assert text.startswith("--model m:f does not fit the parameter servers' memory: ps 0 would ")
    assert (
        "hold 520 MiB" in text and "the largest, emb, 500 MiB" in text and "leaves 480 MiB" in text
    )
    memory.check([100 * mib, 10 * mib], ["a", "b"], budgets, 2, "--model m:f")  # fits


@pytest.mark.parametrize(
    ("cgroup", "files", "expected"),
    [
        # cgroup v2, as a container with its own cgroup namespace sees it.
        ("0::/\n", {"memory.max": "1073741824\n"}, 1 << 30),
        ("0::/\n", {"memory.max": "max\n"}, None),
        # cgroup v1 in a container: the memory root is the container's.
        (
            "4:memory:/kubepods/pod1/abc\n0::/\n",
            {"memory/memory.limit_in_bytes": "536870912"},
            1 << 29,
        ),
        # cgroup v1 on a host: the path from /proc/self/cgroup.
        (
            "4:memory:/user/job\n",
            {
                "memory/user/job/memory.limit_in_bytes": "1048576",
                "memory/memory.limit_in_bytes": "9",
            },
            1 << 20,
        ),
        ("4:memory:/\n", {"memory/memory.limit_in_bytes": "9223372036854771712"}, None),
        ("", {}, None),
    ],
)
def test_the_memory_limit_is_read_from_the_cgroup(tmp_path, cgroup, files, expected):
    proc = tmp_path / "cgroup"
    proc.write_text(cgroup)
    root = tmp_path / "sys"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert memory.cgroup_limit(proc, root) == expected
