"""The node tests' reads (tfjob_testbed.core.reads) on the real API server: for the arguments
the tests give `kubectl get`, the same JSON kubectl prints; {} for an object that is not there;
a pod's log path; and what only kubectl answers left to it."""

from __future__ import annotations

import pytest

from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.reads import Reads
from tfjob_testbed.sandbox import install_crd

pytestmark = pytest.mark.integration


def _names(body: dict) -> list[tuple[str, str, str]]:
    return sorted((i["apiVersion"], i["kind"], i["metadata"]["name"]) for i in body["items"])


@pytest.mark.smoke
def test_reads_answer_as_kubectl_get_does(control_plane, kubectl, crd, ns):
    reads = Reads(control_plane.kubeconfig)
    job = tfjob(name="readme")
    job["metadata"]["namespace"] = ns
    kubectl.apply(job)
    kubectl("create", "configmap", "one", "-n", ns, "--from-literal=a=b")
    kubectl("label", "configmap", "one", "-n", ns, "team=vision")
    kubectl("create", "configmap", "two", "-n", ns)
    for args in [
        ("tfjobs.tfjob.dev", "readme", "-n", ns),
        ("tfjob.tfjob.dev", "readme", "-n", ns),
        ("configmap/one", "-n", ns),
        ("crd", "tfjobs.tfjob.dev"),
        ("namespace", ns),
    ]:
        got = reads.get(*args)
        assert got is not None, args
        want = kubectl.get_json(*args)
        assert got["metadata"]["uid"] == want["metadata"]["uid"], args
        assert got.get("spec") == want.get("spec") and got.get("data") == want.get("data"), args
    for args in [
        ("cm", "-n", ns),
        ("configmaps", "-n", ns, "-l", "team=vision"),
        ("configmaps", "-n", ns, "--field-selector", "metadata.name=two"),
        ("events", "-n", ns),
        ("nodes",),
    ]:
        # Events keep coming (the operator's and the StatefulSet controller's) while this
        # reads: what the reads see lies between kubectl's answer before and after.
        before = set(_names(kubectl.get_json(*args)))
        got = reads.get(*args)
        assert got is not None, args
        after = set(_names(kubectl.get_json(*args)))
        assert before <= set(_names(got)) <= after, args
    assert _names(reads.get("configmaps", "-n", ns, "-l", "team=vision") or {}) == [
        ("v1", "ConfigMap", "one")
    ]
    assert reads.get("tfjobs.tfjob.dev", "missing", "-n", ns) == {}
    assert reads.get("pods", "--sort-by", ".metadata.name", "-n", ns) is None
    assert reads.get("no-such-kind", "-n", ns) is None
    # Where both groups serve `tfjob` (Kubeflow's CRD beside ours), the plain name is kubectl's
    # to resolve.
    install_crd(kubectl, "kubeflow.org")
    assert Reads(control_plane.kubeconfig).get("tfjob", "readme", "-n", ns) is None
    # No kubelet here: a pod's log cannot be read, and says so as "" (kubectl logs' stdout).
    assert reads.logs("no-such-pod", ns) == ""
