"""`tfjob scale`: the merge patch it sends for which job, and what it refuses before sending
anything. (The command against a real API server: tests/integration/test_cli.py.)"""

from __future__ import annotations

import pytest

from tfjob_operator.api.spec import ReplicaType as RT
from tfjob_operator.cli.commands import build_parser
from tfjob_operator.cli.connection import EXIT_FAILED, EXIT_USAGE, CliError
from tfjob_operator.cli.scale import describe, scale_patch
from tfjob_testbed.core.jobs import tfjob


def job(replicas, status=None, **spec):
    body = tfjob(name="mnist", namespace="ml", replicas=replicas, status=status, **spec)
    body["metadata"]["resourceVersion"] = "42"
    return body


@pytest.mark.parametrize(
    ("replicas", "wanted", "patch", "said"),
    [
        (
            {"PS": 1, "Worker": 2},
            {RT.WORKER: 3},
            {"Worker": {"replicas": 3}},
            "Worker 2 → 3",
        ),
        (
            {"PS": 1, "Worker": 2},
            {RT.WORKER: 4, RT.PS: 2},
            {"Worker": {"replicas": 4}, "PS": {"replicas": 2}},
            "Worker 2 → 4, PS 1 → 2",
        ),
        (
            {"PS": 1, "Worker": 2},
            {RT.WORKER: 2, RT.PS: 3},
            {"PS": {"replicas": 3}},
            "PS 1 → 3",
        ),
        ({"Chief": 1, "Worker": 2}, {RT.WORKER: 0}, {"Worker": {"replicas": 0}}, "Worker 2 → 0"),
    ],
)
def test_the_patch_names_only_what_changes_and_the_version_read(replicas, wanted, patch, said):
    body = job(replicas)
    got = scale_patch(body, wanted)
    assert got == {"metadata": {"resourceVersion": "42"}, "spec": {"tfReplicaSpecs": patch}}
    assert describe(body, got) == said


def test_replicas_it_has_already_need_no_patch():
    assert scale_patch(job({"PS": 1, "Worker": 2}), {RT.WORKER: 2, RT.PS: 1}) == {}


@pytest.mark.parametrize(
    ("body", "wanted", "code", "words"),
    [
        (
            job({"Chief": 1}),
            {RT.WORKER: 2},
            EXIT_USAGE,
            "TFJob ml/mnist has no Worker replicas to scale (its replica types: Chief)",
        ),
        (
            job({"Worker": 2}),
            {RT.WORKER: 3, RT.PS: 1},
            EXIT_USAGE,
            "TFJob ml/mnist has no PS replicas to scale",
        ),
        (
            job({"PS": 1, "Worker": 2}),
            {RT.WORKER: 0},
            EXIT_USAGE,
            "TFJob ml/mnist would be invalid: spec.tfReplicaSpecs: worker 0 decides success",
        ),
        (
            job(
                {"Worker": 2},
                status={"conditions": [{"type": "Succeeded", "status": "True"}]},
            ),
            {RT.WORKER: 3},
            EXIT_FAILED,
            "TFJob ml/mnist has finished (Succeeded); a finished job is not resized",
        ),
    ],
)
def test_what_is_refused_before_anything_is_sent(body, wanted, code, words):
    with pytest.raises(CliError) as e:
        scale_patch(body, wanted)
    assert e.value.code == code and words in str(e.value)


@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_a_count_that_is_no_replica_count_is_a_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["scale", "mnist", "--workers", bad])
    assert e.value.code == 2 and "is not a replica count" in capsys.readouterr().err
    args = build_parser().parse_args(["scale", "mnist", "--workers", "3", "--ps", "0"])
    assert (args.command, args.name, args.workers, args.ps) == ("scale", "mnist", 3, 0)
