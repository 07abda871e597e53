"""The memory arithmetic that decides whether a model fits the parameter servers."""

from __future__ import annotations

import pytest

from tfjob_trainer import UsageError
from tfjob_trainer.runtime import memory


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
