"""Pod templates read with Kubernetes' published schema: shapes users get wrong, and what
kubectl would normalize."""

from __future__ import annotations

import pytest

from tfjob_operator.api import podtemplate

BASE = "spec.tfReplicaSpecs.Worker.template"


def tpl(**container):
    return {"spec": {"containers": [{"name": "tensorflow", "image": "x", **container}]}}


def test_the_schema_is_the_newest_strict_one_and_only_what_a_pod_template_reaches():
    major, minor, _ = (int(x) for x in podtemplate.schema_version().split("."))
    assert (major, minor) >= (1, 37)
    defs = podtemplate.definitions()
    assert podtemplate.ROOT in defs and "io.k8s.api.core.v1.Container" in defs
    assert "io.k8s.api.apps.v1.StatefulSet" not in defs


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        (
            {"spec": {"containers": {"tensorflow": {"image": "x"}}}},
            f"{BASE}.spec.containers: must be a list, not a map",
        ),
        (tpl(env={"A": "1"}), f"{BASE}.spec.containers[0].env: must be a list, not a map"),
        (
            tpl(ports={"tfjob-port": 2222}),
            f"{BASE}.spec.containers[0].ports: must be a list, not a map",
        ),
        (
            tpl(ports=[{"containerPort": "2222"}]),
            f"{BASE}.spec.containers[0].ports[0].containerPort: must be an integer, not a string",
        ),
        (
            tpl(ports=[{"name": "tfjob-port"}]),
            f"{BASE}.spec.containers[0].ports[0].containerPort: required",
        ),
        (
            {"spec": {"contianers": []}},
            f"{BASE}.spec.contianers: unknown field; did you mean 'containers'?",
        ),
        (
            tpl(imagePullPolicy=True),
            f"{BASE}.spec.containers[0].imagePullPolicy: must be a string, not true or false",
        ),
        (
            tpl(resources={"limits": {"memory": "4GB"}}),
            f"{BASE}.spec.containers[0].resources.limits.memory: '4GB' is not a Kubernetes "
            "quantity",
        ),
        (
            tpl(resources={"limits": {"cpu": [1]}}),
            f"{BASE}.spec.containers[0].resources.limits.cpu: must be a string or a number",
        ),
        (
            {"metadata": {"labels": {"version": 2}}, "spec": {"containers": []}},
            f"{BASE}.metadata.labels.version: must be a string, not an integer",
        ),
        (
            {"spec": {"containers": [{"name": "tensorflow"}, {"name": "tensorflow"}]}},
            f"{BASE}.spec.containers[1]: same name as [0]",
        ),
        (
            tpl(ports=[{"containerPort": 2222}, {"containerPort": 2222, "protocol": "TCP"}]),
            f"{BASE}.spec.containers[0].ports[1]: same containerPort/protocol as [0]",
        ),
        (
            tpl(volumeMounts=[{"name": "a", "mountPath": "/d"}, {"name": "b", "mountPath": "/d"}]),
            f"{BASE}.spec.containers[0].volumeMounts[1]: same mountPath as [0]",
        ),
        ("a string", f"{BASE}: must be a map (a pod template), not string"),
    ],
)
def test_wrong_shapes_name_the_field(template, problem):
    reading = podtemplate.read(template, BASE)
    assert any(p.startswith(problem) for p in reading.problems), reading.problems


def test_numeric_quantities_become_strings_as_kubectl_sends_them():
    reading = podtemplate.read(
        tpl(
            resources={
                "limits": {"cpu": 1, "memory": "4Gi", "nvidia.com/gpu": 2},
                "requests": {"cpu": 0.5, "ephemeral-storage": 1e9},
            },
            livenessProbe={"tcpSocket": {"port": 2222.0}},
        ),
        BASE,
    )
    assert reading.problems == []
    c = reading.template["spec"]["containers"][0]
    assert c["resources"] == {
        "limits": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "2"},
        "requests": {"cpu": "0.5", "ephemeral-storage": "1000000000"},
    }
    assert c["livenessProbe"]["tcpSocket"]["port"] == 2222


def test_an_env_name_twice_keeps_the_last_as_kubernetes_does_with_a_warning():
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "x"}, {"name": "A", "value": "2"}]
    reading = podtemplate.read(tpl(env=env), BASE)
    assert reading.problems == []
    assert reading.template["spec"]["containers"][0]["env"] == env[1:]
    (warning,) = reading.warnings
    assert warning.startswith(f"{BASE}.spec.containers[0].env: A is set twice")


def test_reading_does_not_change_the_input():
    original = tpl(resources={"limits": {"cpu": 1}})
    podtemplate.read(original, BASE)
    assert original["spec"]["containers"][0]["resources"]["limits"]["cpu"] == 1


def test_odd_keys_are_quoted_in_field_paths():
    assert podtemplate.field_path("a", ["limits", "nvidia.com/gpu", 0]) == (
        "a.limits['nvidia.com/gpu'][0]"
    )
