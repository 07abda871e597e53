"""What the integration tests share: one namespace's TFJobs and children, read the way a user
would look at them, and how long to wait for what the operator and the control plane do."""

from __future__ import annotations

import json

import kubernetes

from tfjob_operator.api.spec import GROUP, PLURAL, VERSION
from tfjob_operator.rules import status as st
from tfjob_testbed.core.kube import wait_for

CHILD_WAIT = 60
GC_WAIT = 120  # the garbage collector finds a new kind at its next discovery, every 30 s


def without_crds(kubectl, *crds: str) -> None:
    """The CRDs deleted, if a test before installed them, and gone: a test of what the operator
    says when they are missing runs in any order."""
    kubectl("delete", "crd", *crds, "--ignore-not-found", "--timeout=120s")


class Job:
    """Read-side helpers for one namespace."""

    def __init__(self, custom, core, apps, kubectl, ns, group=GROUP):
        self.custom, self.core, self.apps, self.kubectl, self.ns = custom, core, apps, kubectl, ns
        self.group = group  # the TFJobs' API group: tfjob.dev, or Kubeflow's kubeflow.org
        self.resource = f"{PLURAL}.{group}"  # for kubectl, unambiguous with both installed

    def create(self, body):
        body["metadata"]["namespace"] = self.ns
        body["metadata"].pop("uid", None)
        self.kubectl.apply(body)
        return body["metadata"]["name"]

    def get(self, name):
        return self.custom.get_namespaced_custom_object(self.group, VERSION, self.ns, PLURAL, name)

    def status(self, name):
        return self.get(name).get("status") or {}

    def wait_state(self, name, state, timeout=CHILD_WAIT):
        return wait_for(
            lambda: st.state(s := self.status(name)) == state and s,
            timeout,
            f"TFJob {name} to be {state} (now {st.state(self.status(name))!r})",
        )

    def statefulsets(self, name):
        sel = f"tfjob.dev/job-name={name}"
        return {
            s.metadata.name: s
            for s in self.apps.list_namespaced_stateful_set(self.ns, label_selector=sel).items
        }

    def services(self, name):
        sel = f"tfjob.dev/job-name={name}"
        return {
            s.metadata.name: s
            for s in self.core.list_namespaced_service(self.ns, label_selector=sel).items
        }

    def deployments(self, name):
        sel = f"tfjob.dev/job-name={name}"
        return {
            d.metadata.name: d
            for d in self.apps.list_namespaced_deployment(self.ns, label_selector=sel).items
        }

    def pods(self, name):
        sel = f"tfjob.dev/job-name={name}"
        return sorted(
            p.metadata.name
            for p in self.core.list_namespaced_pod(self.ns, label_selector=sel).items
        )

    def wait_pods(self, name, count):
        return wait_for(
            lambda: len(p := self.pods(name)) == count and p, CHILD_WAIT, f"{count} pods of {name}"
        )

    def wait_replicas(self, name, want):
        def check():
            got = {n: s.spec.replicas for n, s in self.statefulsets(name).items()}
            return got == want and got

        return wait_for(check, CHILD_WAIT, f"StatefulSet replicas {want}")

    def suspend(self, name, value):
        patch = json.dumps({"spec": {"runPolicy": {"suspend": value}}})
        self.kubectl("patch", self.resource, name, "-n", self.ns, "--type=merge", "-p", patch)

    def gone(self, read):
        """True once `read()` answers 404."""
        try:
            read()
        except kubernetes.client.ApiException as e:
            return e.status == 404
        return False

    def events(self, name):
        items = self.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.name={name},involvedObject.kind=TFJob"
        ).items
        return [(e.type, e.reason, e.message) for e in items]

    def condition(self, name, cond_type):
        return st.find(self.status(name), cond_type)

    def wait_condition(self, name, cond_type, timeout=CHILD_WAIT):
        return wait_for(
            lambda: self.condition(name, cond_type),
            timeout,
            f"condition {cond_type} on TFJob {name} (now {st.state(self.status(name))!r})",
        )

    def wait_event(self, name, reason, timeout=CHILD_WAIT):
        return wait_for(
            lambda: [e for e in self.events(name) if e[1] == reason],
            timeout,
            f"a {reason} event on TFJob {name}",
        )
