"""Which API errors only a spec change can heal (the job fails as InvalidSpec) and which are
retried (and become a ReconcileError condition if they last)."""

from __future__ import annotations

import json

import kubernetes
import pytest

from tfjob_operator.controller.reconcile import is_terminal


def api_error(status: int, message: str) -> kubernetes.client.ApiException:
    e = kubernetes.client.ApiException(status=status, reason="Reason")
    e.body = json.dumps({"kind": "Status", "message": message})
    return e


@pytest.mark.parametrize(
    ("status", "message", "terminal"),
    [
        (422, 'StatefulSet.apps "x" is invalid: spec.template...containerPort', True),
        (400, "admission webhook denied the request: limits required", True),
        (413, "Request entity too large: limit is 3145728", True),
        (500, "failed to create typed patch object: .spec.x: field not declared in schema", True),
        (500, "etcdserver: request is too large", True),
        (500, "Internal error occurred: connection refused", False),
        (503, "the server is currently unable to handle the request", False),
        (403, 'services "x" is forbidden: exceeded quota: no-services', False),
        (403, 'User "x" cannot patch resource "statefulsets"', False),
        (409, "Operation cannot be fulfilled: the object has been modified", False),
        (429, "Too many requests", False),
    ],
)
def test_what_only_a_spec_change_can_heal(status, message, terminal):
    assert is_terminal(api_error(status, message)) is terminal
