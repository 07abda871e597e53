"""A running job resized (`tfjob scale`, or an edit of its replicas): every StatefulSet gets the
new TF_CONFIG and stays `OnDelete`, and the operator deletes every pod of the old cluster in
one go, so that the StatefulSet controller makes them all again with the new one. And the
StatefulSets of a job made before `OnDelete` switch to it on their next apply.

There is no kubelet: the StatefulSet controller creates the Pod objects, the tests write their
container statuses as a kubelet would, and a pod no node has taken goes at once when deleted.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.integration.user_view import CHILD_WAIT
from tfjob_operator.api.spec import parse_spec
from tfjob_operator.rules import naming
from tfjob_operator.rules.children import JobRef, desired_children
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.project.tfjob_cli import tfjob_cli

pytestmark = pytest.mark.integration


def tf_config(sts, index):
    container = sts.spec.template.spec.containers[0]
    template = next(e.value for e in container.env if e.name == "TF_CONFIG")
    return json.loads(template.replace("$(TFJOB_TASK_INDEX)", str(index)))


def pods(job, name):
    sel = f"tfjob.dev/job-name={name}"
    return {
        p.metadata.name: p for p in job.core.list_namespaced_pod(job.ns, label_selector=sel).items
    }


def on_current_revisions(job, name, count):
    """The job's pods once there are `count`, every one made from its StatefulSet's current
    template, none being deleted."""
    sets = job.statefulsets(name)
    now = pods(job, name)
    if len(now) != count or any(p.metadata.deletion_timestamp for p in now.values()):
        return None
    for p in now.values():
        rt = naming.replica_type_of(p.metadata.labels[naming.LABEL_REPLICA_TYPE])
        s = sets[naming.replica_name(name, rt)]
        if s.status.observed_generation != s.metadata.generation:
            return None
        if p.metadata.labels.get(naming.LABEL_REVISION) != s.status.update_revision:
            return None
    return now


@pytest.mark.smoke
def test_a_resize_restarts_every_task_together_with_the_new_cluster(
    job, kubelet, control_plane, ns
):
    name = job.create(tfjob(name="resize", replicas={"PS": 1, "Worker": 2}))
    kubelet.run_all(job.wait_pods(name, 3))
    job.wait_state(name, "Running")
    before = pods(job, name)
    sets = job.statefulsets(name)
    assert {s.spec.update_strategy.type for s in sets.values()} == {"OnDelete"}

    done = tfjob_cli(control_plane.kubeconfig, "scale", name, "--workers", "3", "-n", ns)
    assert done.returncode == 0, done.stderr
    assert f"tfjobs.tfjob.dev/{name} scaled: Worker 2 → 3" in done.stdout

    after = wait_for(
        lambda: on_current_revisions(job, name, 4), CHILD_WAIT, "4 pods of the new template"
    )
    assert not {p.metadata.uid for p in before.values()} & {
        p.metadata.uid for p in after.values()
    }, "every pod of the old cluster was made again"
    sets = job.statefulsets(name)
    workers = [f"resize-worker-{i}.resize-worker.{ns}.svc.cluster.local:2222" for i in range(3)]
    for s in sets.values():
        assert s.spec.update_strategy.type == "OnDelete"
        assert tf_config(s, 0)["cluster"]["worker"] == workers
    status = job.status(name)
    assert status["lastStop"]["cause"] == "Resized"
    assert status["lastStop"]["message"].startswith("Worker 2 → 3: 3 pods restart together")
    assert [e for e in job.events(name) if e[1] == "Resized"]
    assert "failure" not in status
    one_line = tfjob_cli(control_plane.kubeconfig, "scale", name, "--workers", "3", "-n", ns)
    assert "has Worker 3 already" in one_line.stdout


def test_statefulsets_made_before_on_delete_switch_to_it_on_their_next_apply(kube, apps, ns):
    """What the operator before this one applied (no updateStrategy: Kubernetes defaults a
    RollingUpdate, with a rollingUpdate that no apply of ours owns), applied again by this one:
    the API server refuses OnDelete beside that rollingUpdate, so it goes first."""
    spec = parse_spec(tfjob(replicas={"Worker": 1})["spec"])
    (sts,) = [
        c
        for c in desired_children(JobRef("old", ns, "0000"), spec, "cluster.local")
        if c["kind"] == "StatefulSet"
    ]
    del sts["metadata"]["ownerReferences"]  # the garbage collector would remove an orphan
    sts["spec"]["replicas"] = 0
    before = copy.deepcopy(sts)
    del before["spec"]["updateStrategy"]
    assert kube.apply(before) == 1
    old = apps.read_namespaced_stateful_set("old-worker", ns)
    assert old.spec.update_strategy.rolling_update.partition == 0
    assert kube.apply(sts) == 2, "the generation as applied"
    new = apps.read_namespaced_stateful_set("old-worker", ns)
    assert new.spec.update_strategy.type == "OnDelete"
    assert new.spec.update_strategy.rolling_update is None
    assert kube.apply(sts) == 2, "then a no-op"
