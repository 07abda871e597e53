"""The operator's update entries folded into its apply entry: tables over `ownership`, and
what `Kube.apply` does when other writes keep coming between the apply and the fold."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest

from tfjob_operator.controller import client
from tfjob_operator.controller.ownership import folded, union
from tfjob_operator.controller.refusals import is_terminal
from tfjob_operator.controller.rest import APPLY, JSON_PATCH

ME = "tfjob-operator"


def entry(manager: str, operation: str, fields: dict, **more: str) -> dict:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "apps/v1",
        "time": "2026-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **more,
    }


@pytest.mark.parametrize(
    ("a", "b", "both"),
    [
        ({}, {}, {}),
        ({"f:spec": {"f:replicas": {}}}, {}, {"f:spec": {"f:replicas": {}}}),
        (
            {"f:spec": {"f:replicas": {}}},
            {"f:spec": {"f:template": {".": {}}}, "f:metadata": {}},
            {"f:spec": {"f:replicas": {}, "f:template": {".": {}}}, "f:metadata": {}},
        ),
        (
            {"f:env": {'k:{"name":"A"}': {".": {}, "f:value": {}}}},
            {"f:env": {'k:{"name":"B"}': {".": {}}}},
            {"f:env": {'k:{"name":"A"}': {".": {}, "f:value": {}}, 'k:{"name":"B"}': {".": {}}}},
        ),
    ],
)
def test_union_names_every_field_of_either(a, b, both):
    assert union(a, b) == both
    assert union(b, a) == both


def test_an_object_the_operator_only_applied_has_nothing_to_fold():
    managed = [
        entry(ME, "Apply", {"f:spec": {}}),
        entry("kube-controller-manager", "Update", {"f:status": {}}, subresource="status"),
        entry("kubectl-annotate", "Update", {"f:metadata": {}}),
    ]
    assert folded(managed, ME) is None


def test_the_operators_create_and_patches_fold_into_its_apply_entry():
    created = entry(ME, "Update", {"f:spec": {"f:replicas": {}, "f:template": {}}})
    scaled = entry(ME, "Update", {"f:spec": {"f:replicas": {}}}, subresource="scale")
    theirs = entry("kubectl-annotate", "Update", {"f:metadata": {"f:annotations": {}}})
    applied = entry(ME, "Apply", {"f:spec": {"f:serviceName": {}}})
    got = folded([created, scaled, theirs, applied], ME)
    assert got == [
        scaled,  # a subresource's entry is left alone
        theirs,  # and so is everyone else's
        entry(ME, "Apply", {"f:spec": {"f:serviceName": {}, "f:replicas": {}, "f:template": {}}}),
    ]


def test_a_created_object_not_applied_yet_gets_an_apply_entry():
    created = entry(ME, "Update", {"f:spec": {"f:replicas": {}}})
    assert folded([created], ME) == [entry(ME, "Apply", {"f:spec": {"f:replicas": {}}})]


class WrittenBetween:
    """An API server on which the StatefulSet's status is written between each apply and the
    fold that follows it, `times` times; after a fold, an apply finds nothing to fold."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.sent: list[str] = []
        self.owned = False

    def request(self, method: str, url_path: str, *, body: Any = None, **kw: Any) -> bytes:
        verb = {APPLY: "apply", JSON_PATCH: "fold"}[kw["content_type"]]
        self.sent.append(verb)
        if verb == "fold":
            if self.times:
                self.times -= 1
                raise kubernetes.client.ApiException(status=422, reason="Unprocessable Entity")
            self.owned = True
            return b"{}"
        operation = "Apply" if self.owned else "Update"
        meta = {
            "namespace": "team-a",
            "name": "j-worker",
            "resourceVersion": str(len(self.sent)),
            "generation": 2,
            "managedFields": [entry(ME, operation, {"f:spec": {}})],
        }
        return json.dumps({"metadata": meta}).encode()


def statefulset() -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"namespace": "team-a", "name": "j-worker"},
        "spec": {},
    }


@pytest.mark.parametrize(
    ("between", "sent"),
    [
        (0, ["apply", "fold", "apply"]),
        (1, ["apply", "fold", "apply", "fold", "apply"]),
        (2, ["apply", "fold", "apply", "fold", "apply", "fold", "apply"]),
    ],
)
def test_a_fold_met_by_a_write_between_is_tried_again_on_the_object_as_it_is_now(between, sent):
    kube = client.Kube()
    kube.rest = server = WrittenBetween(between)  # type: ignore[assignment]
    assert kube.apply(statefulset(), fresh=False, changed=True) == 2
    assert server.sent == sent and server.owned


def test_a_fold_met_by_writes_between_every_time_fails_the_reconcile_for_a_retry():
    """Not a warning in the log: the apply went through, but a field the spec dropped would
    stay. The reconcile fails with a conflict, which the spec did not cause, and is retried."""
    kube = client.Kube()
    kube.rest = server = WrittenBetween(client.FOLD_ATTEMPTS)  # type: ignore[assignment]
    with pytest.raises(kubernetes.client.ApiException) as raised:
        kube.apply(statefulset(), fresh=False, changed=True)
    assert raised.value.status == 409 and not is_terminal(raised.value)
    assert (
        "apps/v1/namespaces/team-a/statefulsets/j-worker"
        in json.loads(raised.value.body)["message"]
    )
    assert server.sent == ["apply", "fold"] * client.FOLD_ATTEMPTS and not server.owned
