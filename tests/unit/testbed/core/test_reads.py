"""`kubectl get`'s arguments as the node tests write them, read as API queries; what only kubectl
answers is left to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfjob_testbed.core.reads import Query, Resource, names_of, parse


@pytest.mark.parametrize(
    ("args", "query"),
    [
        (("pod", "p", "-n", "ns"), Query("pod", "p", "ns", ())),
        (("pods", "-n", "ns", "-l", "a=b"), Query("pods", None, "ns", (("labelSelector", "a=b"),))),
        (
            ("events", "--namespace=ns", "--field-selector", "involvedObject.name=j"),
            Query("events", None, "ns", (("fieldSelector", "involvedObject.name=j"),)),
        ),
        (("crd", "tfjobs.tfjob.dev"), Query("crd", "tfjobs.tfjob.dev", "default", ())),
        (("nodes",), Query("nodes", None, "default", ())),
        (("Workloads.kueue.x-k8s.io", "-A"), Query("workloads.kueue.x-k8s.io", None, None, ())),
        (("pod/p", "-n", "ns"), Query("pod", "p", "ns", ())),
        # Only kubectl: other flags, several kinds, a flag without its value.
        (("pods", "--sort-by", ".metadata.name"), None),
        (("pods,svc", "-n", "ns"), None),
        (("pods", "-n"), None),
        ((), None),
    ],
)
def test_kubectl_get_arguments_as_a_query(args, query):
    assert parse(args) == query


def test_a_resource_answers_to_every_name_kubectl_takes():
    names = names_of(
        "apps", {"name": "statefulsets", "singularName": "statefulset", "kind": "StatefulSet",
                 "shortNames": ["sts"]},
    )  # fmt: skip
    assert names == {
        "statefulsets", "statefulset", "sts",
        "statefulsets.apps", "statefulset.apps", "sts.apps",
    }  # fmt: skip
    assert names_of("", {"name": "pods", "singularName": "", "kind": "Pod"}) == {"pods", "pod"}


@pytest.mark.parametrize(
    ("resource", "namespace", "name", "path"),
    [
        (Resource("", "v1", "pods", True, "Pod"), "ns", "p", "/api/v1/namespaces/ns/pods/p"),
        (Resource("", "v1", "pods", True, "Pod"), None, None, "/api/v1/pods"),
        (Resource("", "v1", "nodes", False, "Node"), "ns", None, "/api/v1/nodes"),
        (
            Resource("tfjob.dev", "v1", "tfjobs", True, "TFJob"), "ns", "j",
            "/apis/tfjob.dev/v1/namespaces/ns/tfjobs/j",
        ),
    ],
)  # fmt: skip
def test_paths(resource, namespace, name, path):
    assert resource.path(namespace, name) == path
    assert Path(path).is_absolute()
