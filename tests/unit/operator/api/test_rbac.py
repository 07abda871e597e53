"""The ClusterRole grants what the operator does, and nothing more. (That it is enough is shown
on the real API server: tests/integration/test_plain_manifests.py runs a job as the
ServiceAccount.)"""

from __future__ import annotations

import pytest

from tfjob_operator.api import rbac
from tfjob_operator.api.spec import GROUP, GROUPS, PLURAL
from tfjob_operator.controller import client as kube
from tfjob_operator.controller import handlers
from tfjob_operator.rules.gang import Gang, Scheduler

# What kopf itself needs: posting events, discovering the CRD, following namespace globs;
# and what blockOwnerDeletion needs where OwnerReferencesPermissionEnforcement is on.
FRAMEWORK = {
    ("", "events", "create"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
}


def granted(rules: list[dict] = rbac.RULES) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def used(group: str = GROUP) -> set[tuple[str, str, str]]:
    # Every kind watched under any flags: each gang scheduler adds its PodGroups.
    kinds = {r for gang in (None, *(Gang(s) for s in Scheduler)) for r in handlers.watched(gang)}
    watched = [(group, PLURAL), *((g, p) for g, _, p in kinds)]
    return (
        {(g, p, v) for g, p in watched for v in ("list", "watch")}
        | {(group, r, v) for r, v in kube.JOB_WRITES}
        | {(group, f"{PLURAL}/finalizers", "update")}  # blockOwnerDeletion
        | kube.WRITES
        | kube.READS
        | FRAMEWORK
    )


@pytest.mark.parametrize("group", GROUPS)
def test_rules_grant_exactly_what_is_used(group):
    rules = rbac.rules(group)
    assert granted(rules) - used(group) == set(), "granted but never used"
    assert used(group) - granted(rules) == set(), "used but not granted"
    assert rbac.rules() == rbac.RULES


def test_no_wildcards_and_no_secrets():
    for rule in rbac.RULES:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
    assert not any(r == "secrets" for _, r, _ in granted())


def test_lease_rules_grant_exactly_the_elector_calls():
    lease_granted = {
        (g, r, v)
        for rule in rbac.LEASE_RULES
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert lease_granted == kube.LEASE_WRITES
    # Reading and renewing are limited to the operator's own Lease.
    named = [r for r in rbac.LEASE_RULES if "resourceNames" in r]
    assert named == [{**named[0], "resourceNames": [rbac.LEASE_NAME]}]
    assert set(named[0]["verbs"]) == {"get", "update"}


def test_kueue_rules_grant_exactly_its_calls():
    """--kueue adds the Workloads (watched, made, their status written) and cluster-scoped
    reads; nothing else, and nothing without it."""
    added = granted(rbac.rules(kueue=True)) - granted()
    workloads = {("kueue.x-k8s.io", "workloads", v) for v in ("list", "watch")}
    assert added == kube.KUEUE_WRITES | kube.KUEUE_READS | kube.KUEUE_JOB_WRITES | workloads
    assert handlers.KUEUE_WORKLOADS == ("kueue.x-k8s.io", "workloads")
    for rule in rbac.KUEUE_CLUSTER_RULES:
        assert set(rule["verbs"]) <= {"get", "list"}, "read-only"


def test_kueue_reader_rules_only_read_tfjobs_of_either_group():
    """Kueue's own ServiceAccount reads the TFJobs that own our children, nothing more."""
    assert granted(rbac.KUEUE_READER_RULES) == {
        (g, PLURAL, v) for g in GROUPS for v in ("get", "list", "watch")
    }


def test_katib_rules_run_our_trials_and_read_only_statefulsets():
    """Katib's ServiceAccount makes, watches and deletes our TFJobs (its own role has
    kubeflow.org's) and reads the StatefulSets between a trial's pods and its TFJob."""
    assert granted(rbac.KATIB_RULES) == {
        (GROUP, PLURAL, v) for v in ("get", "list", "watch", "create", "delete")
    } | {("apps", "statefulsets", "get")}
