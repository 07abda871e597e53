"""The operator's update entries folded into its apply entry: tables over `ownership`."""

from __future__ import annotations

import pytest

from tfjob_operator.controller.ownership import folded, union

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
