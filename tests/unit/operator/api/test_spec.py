"""Parsing and validation: every error says which field and what would be valid."""

from __future__ import annotations

import pytest

from tfjob_operator.api.spec import ReplicaType, RestartPolicy, SpecError, parse_spec
from tfjob_testbed.core.jobs import tfjob


def spec_with(**changes):
    body = tfjob(replicas={"PS": 1, "Worker": 2})
    body["spec"].update(changes)
    return body["spec"]


def test_defaults_follow_kubeflow():
    spec = parse_spec(
        {
            "tfReplicaSpecs": {
                "Worker": {
                    "template": {"spec": {"containers": [{"name": "tensorflow", "image": "x"}]}}
                }
            }
        }
    )
    worker = spec.replicas()[ReplicaType.WORKER]
    assert worker.replicas == 1 and worker.restart_policy is RestartPolicy.NEVER
    assert spec.run_policy.clean_pod_policy.value == "Running"
    assert spec.run_policy.backoff_limit is None and spec.run_policy.suspend is False
    assert spec.success_policy == ""


def test_kubeflow_manifest_fields_are_accepted():
    spec = spec_with(
        runPolicy={"cleanPodPolicy": "None", "schedulingPolicy": {"minAvailable": 3}},
        enableDynamicWorker=False,
    )
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    parse_spec(spec)


def test_enable_dynamic_worker_is_acted_on_so_no_warning():
    spec = parse_spec(spec_with(enableDynamicWorker=True))
    assert spec.enable_dynamic_worker is True and spec.warnings == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda s: s["tfReplicaSpecs"]["Worker"].update(replicas=-1),
            "spec.tfReplicaSpecs.Worker.replicas: Input should be greater than or equal to 0",
        ),
        (
            lambda s: s["tfReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes"),
            "spec.tfReplicaSpecs.Worker.restartPolicy: Input should be 'Always', 'OnFailure', "
            "'Never' or 'ExitCode'",
        ),
        (
            lambda s: s["tfReplicaSpecs"]["Worker"].pop("template"),
            "spec.tfReplicaSpecs.Worker.template: Field required",
        ),
        (
            lambda s: s.update(runPolicy={"cleanPodPolicy": "Some"}),
            "spec.runPolicy.cleanPodPolicy: Input should be 'All', 'Running' or 'None'",
        ),
        (
            lambda s: s.update(runPolicy={"backofLimit": 3}),
            "spec.runPolicy.backofLimit: Extra inputs",
        ),
        (
            lambda s: s.update(runPolicy={"terminationGracePeriodSeconds": 0}),
            "spec.runPolicy.terminationGracePeriodSeconds: Input should be greater than or equal "
            "to 1",
        ),
        (
            lambda s: s.update(checkpoint={"mountPath": "/c"}),
            "spec.checkpoint: Value error, set exactly one of claimName or storage",
        ),
        (
            lambda s: s.update(checkpoint={"storage": {"size": "lots"}}),
            "spec.checkpoint.storage.size: String should match pattern",
        ),
        (
            lambda s: s["tfReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=[]),
            "spec.tfReplicaSpecs.Worker.template.spec.containers: at least one container",
        ),
        (
            lambda s: (
                s["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
                    {"name": "other", "image": "x"}
                )
                or s["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(
                    name="main"
                )
            ),
            "name the TensorFlow one 'tensorflow'",
        ),
    ],
)
def test_errors_carry_field_paths(mutate, expected):
    spec = spec_with()
    mutate(spec)
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert any(p.startswith(expected) or expected in p for p in e.value.problems), e.value.problems


@pytest.mark.parametrize(
    ("resources", "ok"),
    [
        ({"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}, True),
        ({"limits": {"nvidia.com/gpu": 2}}, True),
        ({"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}, False),
        ({"requests": {"nvidia.com/gpu": 1}}, False),
        ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2"}}, True),
        ({"requests": {"hugepages-2Mi": "1Gi"}}, True),
    ],
)
def test_gpu_request_must_equal_limit(resources, ok):
    spec = spec_with()
    spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = resources
    if ok:
        parse_spec(spec)
    else:
        with pytest.raises(SpecError, match=r"nvidia.com/gpu request \(1\) must equal its limit"):
            parse_spec(spec)


def _spec(replicas: dict[str, int], **spec):
    return tfjob(replicas=replicas, **spec)["spec"]


@pytest.mark.parametrize(
    ("replicas", "spec", "problem"),
    [
        ({"Chief": 0, "PS": 1}, {}, "Chief has 0 replicas, so worker 0 decides success"),
        ({"Master": 0, "Worker": 0}, {}, "Master has 0 replicas"),
        ({"PS": 1, "Worker": 0}, {}, "worker 0 decides success, and this job has no workers"),
        ({"Chief": 1}, {"successPolicy": "AllWorkers"}, "AllWorkers waits for every worker"),
        ({"Worker": 0}, {"successPolicy": "AllWorkers"}, "AllWorkers waits for every worker"),
    ],
)
def test_jobs_that_could_never_finish_are_refused(replicas, spec, problem):
    with pytest.raises(SpecError) as e:
        parse_spec(_spec(replicas, **spec))
    assert any(problem in p for p in e.value.problems), e.value.problems


@pytest.mark.parametrize(
    "replicas", [{"Chief": 0, "Worker": 1}, {"Worker": 1}, {"Chief": 1, "PS": 1}]
)
def test_jobs_someone_can_finish_are_accepted(replicas):
    parse_spec(_spec(replicas))


@pytest.mark.parametrize(
    ("container", "problem"),
    [
        (
            {"image": ""},
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: required",
        ),
        (
            {"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].volumeMounts[0]: mounts "
            "volume 'data', which spec.tfReplicaSpecs.Worker.template.spec.volumes does not "
            "define",
        ),
        (
            {"resources": {"limits": {"nvidia.com/gpu": 0.5}}},
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits"
            "['nvidia.com/gpu']: 0.5 is not a whole number",
        ),
    ],
)
def test_pods_kubernetes_could_never_create_are_refused_up_front(container, problem):
    spec = _spec({"Worker": 1})
    spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(container)
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert any(p.startswith(problem) for p in e.value.problems), e.value.problems


def test_numeric_gpu_and_cpu_as_kubeflow_writes_them_are_read():
    spec = _spec({"Worker": 1})
    spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": 2, "cpu": 1},
        "requests": {"nvidia.com/gpu": 2, "cpu": 0.5},
    }
    parsed = parse_spec(spec)
    c = parsed.replicas()[ReplicaType.WORKER].template["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2", "cpu": "1"}
