"""The reconciler keeps Kueue's own integrations off a job's children: the queue label that
--kueue-manage-all writes once on a job, and the KueueTookOverChild Warning, posted once."""

from __future__ import annotations

import dataclasses

from tfjob_operator.rules import kueue
from tfjob_operator.rules.kueue.queue import Queueing


def test_manage_all_labels_a_job_without_a_queue_once(cluster):
    cluster.reconciler.queueing = Queueing(manage_all=True)
    key = cluster.create("mnist", replicas={"Worker": 1})
    cluster.reconcile(key, deliver=False)
    cluster.reconcile(key, deliver=False)  # the watch has not brought it back yet
    assert cluster.calls("patch_job") == [
        ("patch_job", *key, {"metadata": {"labels": {kueue.QUEUE_LABEL: "default"}}})
    ]
    # Before any child: Kueue's webhooks must see the label when the StatefulSets come.
    assert [c[0] for c in cluster.kube.calls].index("patch_job") == 0
    cluster.deliver(key)
    cluster.reconcile(key)
    assert len(cluster.calls("patch_job")) == 1


def test_a_labelled_job_and_one_without_manage_all_are_not_patched(cluster):
    cluster.reconciler.queueing = Queueing()
    key = cluster.create("plain", replicas={"Worker": 1})
    cluster.reconcile(key)
    cluster.reconciler.queueing = Queueing(manage_all=True)
    labelled = cluster.create("labelled", replicas={"Worker": 1})
    cluster.kube.stored[labelled]["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team"}
    cluster.deliver(labelled)
    cluster.reconcile(labelled)
    assert cluster.calls("patch_job") == []


def test_a_child_kueue_took_is_warned_of_once(cluster):
    key = cluster.create("mnist", replicas={"Worker": 2})
    cluster.reconcile(key)
    assert "KueueTookOverChild" not in cluster.reasons()
    sts = cluster.lacking_workers(key, 2)
    cluster.sets[key] = [dataclasses.replace(sts, kueue_takeover="label kueue.x-k8s.io/queue-name")]
    cluster.reconcile(key)
    cluster.reconcile(key)
    assert cluster.reasons("mnist").count("KueueTookOverChild") == 1
