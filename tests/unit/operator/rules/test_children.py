"""StatefulSet, Service and PVC rendering, as tables over pure builders."""

from __future__ import annotations

import json

import pytest

from tfjob_operator.api.spec import ReplicaType as RT
from tfjob_operator.api.spec import parse_spec
from tfjob_operator.rules import naming, tfconfig
from tfjob_operator.rules.children import JobRef, built_hash, check_additions, desired_children
from tfjob_operator.rules.gang import Gang, Scheduler
from tfjob_testbed.core.jobs import template, tfjob

JOB = JobRef("mnist", "ml", "uid-1")
OWNER = {
    "apiVersion": "tfjob.dev/v1",
    "kind": "TFJob",
    "name": "mnist",
    "uid": "uid-1",
    "controller": True,
    "blockOwnerDeletion": True,
}


def children(spec_body, **kw):
    return desired_children(JOB, parse_spec(spec_body["spec"]), "cluster.local", **kw)


def by(kind, objs):
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def env_of(sts, container="tensorflow"):
    c = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}, c


def test_every_replica_type_gets_a_headless_service_and_a_statefulset():
    objs = children(tfjob(replicas={"Chief": 1, "PS": 2, "Worker": 3, "Evaluator": 1}))
    names = ["mnist-chief", "mnist-ps", "mnist-worker", "mnist-evaluator"]
    assert [o["kind"] for o in objs] == ["Service"] * 4 + ["StatefulSet"] * 4
    assert list(by("Service", objs)) == names and list(by("StatefulSet", objs)) == names
    for o in objs:
        assert o["metadata"]["ownerReferences"] == [OWNER]
        assert o["metadata"]["namespace"] == "ml"
        assert o["metadata"]["labels"]["tfjob.dev/job-name"] == "mnist"
        assert o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tfjob-operator"
    svc = by("Service", objs)["mnist-ps"]
    assert svc["spec"] == {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"tfjob.dev/job-name": "mnist", "tfjob.dev/replica-type": "ps"},
        "ports": [{"name": "tfjob-port", "port": 2222, "targetPort": 2222, "protocol": "TCP"}],
    }
    sts = by("StatefulSet", objs)["mnist-worker"]
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "mnist-worker"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}, "the operator restarts pods"
    assert sts["spec"]["selector"] == {
        "matchLabels": svc["spec"]["selector"] | {"tfjob.dev/replica-type": "worker"}
    }
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert labels["tfjob.dev/replica-type"] == "worker" and labels["tfjob.dev/job-name"] == "mnist"
    assert sts["spec"]["template"]["spec"]["restartPolicy"] == "Always"


@pytest.mark.parametrize("rt", ["chief", "ps", "worker", "evaluator"])
def test_env_carries_a_tf_config_template_and_the_downward_index(rt):
    objs = children(tfjob(replicas={"Chief": 1, "PS": 1, "Worker": 2, "Evaluator": 1}))
    env, container = env_of(by("StatefulSet", objs)[f"mnist-{rt}"])
    assert env["TFJOB_TASK_INDEX"] == {
        "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
    }
    names = [e["name"] for e in container["env"]]
    assert names.index("TFJOB_TASK_INDEX") < names.index("TF_CONFIG"), "needed for $(VAR)"
    assert env["TFJOB_NAME"] == "mnist" and env["TFJOB_REPLICA_TYPE"] == rt
    cluster = {
        "chief": ["mnist-chief-0.mnist-chief.ml.svc.cluster.local:2222"],
        "ps": ["mnist-ps-0.mnist-ps.ml.svc.cluster.local:2222"],
        "worker": [f"mnist-worker-{i}.mnist-worker.ml.svc.cluster.local:2222" for i in (0, 1)],
    }
    rtype = next(t for t in RT if t.task_type == rt)
    assert env["TF_CONFIG"] == tfconfig.tf_config_template(cluster, rtype)
    assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]


def address(rt, i):
    return f"mnist-{rt}-{i}.mnist-{rt}.ml.svc.cluster.local:2222"


@pytest.mark.parametrize(
    ("rt", "index", "want"),
    [
        ("ps", 1, {"ps": {"1": address("ps", 1)}}),
        (
            "worker",
            2,
            {"ps": [address("ps", 0), address("ps", 1)], "worker": {"2": address("worker", 2)}},
        ),
        (
            "chief",
            0,
            {
                "chief": [address("chief", 0)],
                "ps": [address("ps", i) for i in (0, 1)],
                "worker": [address("worker", i) for i in (0, 1, 2)],
            },
        ),
        ("evaluator", 0, {"evaluator": [address("evaluator", 0)], "chief": [address("chief", 0)]}),
    ],
)
def test_enable_dynamic_worker_gives_each_pod_a_sparse_tf_config(rt, index, want):
    """What the pod `index` of a StatefulSet gets once Kubernetes has expanded its TF_CONFIG."""
    body = tfjob(
        replicas={"Chief": 1, "PS": 2, "Worker": 3, "Evaluator": 1}, enableDynamicWorker=True
    )
    env, _ = env_of(by("StatefulSet", children(body))[f"mnist-{rt}"])
    assert json.loads(tfconfig.expand(env["TF_CONFIG"], index)) == {
        "cluster": want,
        "task": {"type": rt, "index": index},
        "environment": "cloud",
    }


def test_user_template_is_kept_and_only_extended():
    tpl = template(
        env=[{"name": "FOO", "value": "1"}, {"name": "TF_CONFIG", "value": "mine"}],
        ports=[{"name": "tfjob-port", "containerPort": 5000}],
        resources={"requests": {"nvidia.com/gpu": 2, "cpu": "1"}, "limits": {"nvidia.com/gpu": 2}},
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    tpl["metadata"] = {"labels": {"team": "a"}, "annotations": {"x": "y"}}
    tpl["spec"].update(
        nodeSelector={"gpu": "a100"},
        tolerations=[{"key": "gpu", "operator": "Exists"}],
        affinity={"nodeAffinity": {}},
        securityContext={"runAsUser": 1000},
        volumes=[{"name": "data", "emptyDir": {}}],
        restartPolicy="Never",
    )
    tpl["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    body = tfjob(replicas={"Worker": 2})
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"] = tpl
    body["spec"]["checkpoint"] = {"storage": {"size": "1Gi", "storageClassName": "fast"}}
    objs = children(body)
    sts = by("StatefulSet", objs)["mnist-worker"]
    pod = sts["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        "x": "y",
        "tfjob.dev/spec-hash": pod["metadata"]["annotations"]["tfjob.dev/spec-hash"],
        "tfjob.dev/index-0-role": "master",  # no Chief: worker 0 is the master
    }
    assert pod["metadata"]["labels"]["team"] == "a"
    for key in ("nodeSelector", "tolerations", "affinity", "securityContext"):
        assert pod["spec"][key] == tpl["spec"][key]
    env, c = env_of(sts)
    assert env["FOO"] == "1" and env["TF_CONFIG"] != "mine"
    assert [e["name"] for e in c["env"]].count("TF_CONFIG") == 1
    # Numeric quantities are strings, as kubectl would send them.
    assert c["resources"] == {
        "requests": {"nvidia.com/gpu": "2", "cpu": "1"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    assert c["ports"] == [{"name": "tfjob-port", "containerPort": 5000}]
    assert (
        "5000" in env["TF_CONFIG"]
        and by("Service", objs)["mnist-worker"]["spec"]["ports"][0]["port"] == 5000
    )
    assert env["TFJOB_CHECKPOINT_DIR"] == "/checkpoints"
    assert c["volumeMounts"] == [
        {"name": "data", "mountPath": "/data"},
        {"name": "tfjob-checkpoints", "mountPath": "/checkpoints"},
    ]
    assert pod["spec"]["volumes"] == [
        {"name": "data", "emptyDir": {}},
        {"name": "tfjob-checkpoints", "persistentVolumeClaim": {"claimName": "mnist-checkpoints"}},
    ]
    sidecar = pod["spec"]["containers"][1]
    assert sidecar == {"name": "sidecar", "image": "busybox"}
    assert tpl["spec"]["restartPolicy"] == "Never", "the user's template is not mutated"
    pvc = by("PersistentVolumeClaim", objs)["mnist-checkpoints"]
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "fast",
    }
    assert pvc["metadata"]["ownerReferences"] == [OWNER]
    assert objs[0] is pvc, "the claim comes first"


@pytest.mark.parametrize(
    ("checkpoint", "claim", "path", "pvc"),
    [
        ({"claimName": "shared", "mountPath": "/ckpt"}, "shared", "/ckpt", False),
        ({"storage": {"size": "5Gi"}}, "mnist-checkpoints", "/checkpoints", True),
    ],
)
def test_checkpoint_volume_goes_to_every_training_replica_but_not_ps(checkpoint, claim, path, pvc):
    body = tfjob(replicas={"Chief": 1, "PS": 1, "Worker": 1, "Evaluator": 1}, checkpoint=checkpoint)
    objs = children(body)
    assert bool(by("PersistentVolumeClaim", objs)) is pvc
    for name, sts in by("StatefulSet", objs).items():
        env, _ = env_of(sts)
        vols = sts["spec"]["template"]["spec"].get("volumes", [])
        if name == "mnist-ps":
            assert "TFJOB_CHECKPOINT_DIR" not in env and vols == []
        else:
            assert env["TFJOB_CHECKPOINT_DIR"] == path
            assert vols == [
                {"name": "tfjob-checkpoints", "persistentVolumeClaim": {"claimName": claim}}
            ]


@pytest.mark.parametrize(
    ("when_deleted", "owners"), [(None, [OWNER]), ("Delete", [OWNER]), ("Retain", None)]
)
def test_a_retained_claim_is_not_owned_by_the_tfjob(when_deleted, owners):
    """whenDeleted: Retain, as a StatefulSet's persistentVolumeClaimRetentionPolicy: the
    garbage collector leaves the claim when the TFJob goes (`kubectl replace --force`), and
    the TFJob made again under its name mounts it, checkpoints and all."""
    storage = {"size": "1Gi", **({"whenDeleted": when_deleted} if when_deleted else {})}
    objs = children(tfjob(replicas={"Worker": 1}, checkpoint={"storage": storage}))
    pvc = by("PersistentVolumeClaim", objs)["mnist-checkpoints"]
    assert pvc["metadata"].get("ownerReferences") == owners
    assert pvc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tfjob-operator"


def test_scaled_down_keeps_everything_but_the_pods():
    body = tfjob(replicas={"PS": 1, "Worker": 2})
    up, down = children(body), children(body, scaled_down=True)
    assert [o["metadata"]["name"] for o in up] == [o["metadata"]["name"] for o in down]
    assert [o["spec"].get("replicas") for o in down] == [None, None, 0, 0]


def test_single_unnamed_container_gets_tf_config():
    body = tfjob(replicas={"Worker": 1})
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    env, _ = env_of(by("StatefulSet", children(body))["mnist-worker"], container="main")
    assert "TF_CONFIG" in env


def test_a_user_port_2222_is_reused_whatever_its_name():
    body = tfjob(replicas={"Worker": 1})
    c = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    c["ports"] = [{"name": "grpc", "containerPort": 2222}]
    sts = by("StatefulSet", children(body))["mnist-worker"]
    _, container = env_of(sts)
    assert container["ports"] == [{"name": "grpc", "containerPort": 2222}]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda c, s: (
                c.update(volumeMounts=[{"name": "d", "mountPath": "/checkpoints/"}])
                or s.update(volumes=[{"name": "d", "emptyDir": {}}])
            ),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].volumeMounts[0]: "
            "/checkpoints is where the checkpoint volume goes",
        ),
        (
            lambda c, s: s.update(volumes=[{"name": "tfjob-checkpoints", "emptyDir": {}}]),
            "spec.tfReplicaSpecs.Worker.template.spec.volumes[0]: the name tfjob-checkpoints",
        ),
    ],
)
def test_what_the_operator_adds_is_not_silently_overridden(change, problem):
    body = tfjob(replicas={"Worker": 1}, checkpoint={"storage": {"size": "1Gi"}})
    tpl = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    change(tpl["spec"]["containers"][0], tpl["spec"])
    problems, _ = check_additions(parse_spec(body["spec"]))
    assert any(p.startswith(problem) for p in problems), problems


@pytest.mark.parametrize(
    ("run_policy", "own", "grace"),
    [
        ({}, None, 30),  # Kubernetes' own
        ({"terminationGracePeriodSeconds": 300}, None, 300),
        ({"terminationGracePeriodSeconds": 300}, 45, 45),  # the template's own wins
        ({}, 0, 0),
    ],
)
def test_the_grace_period_a_stopped_task_has_to_save_and_its_env(run_policy, own, grace):
    body = tfjob(replicas={"PS": 1, "Worker": 1}, run_policy=run_policy)
    for rs in body["spec"]["tfReplicaSpecs"].values():
        pod_spec = rs["template"]["spec"]
        pod_spec["containers"][0]["env"] = [{"name": "TFJOB_GRACE_PERIOD_SECONDS", "value": "1"}]
        if own is not None:
            pod_spec["terminationGracePeriodSeconds"] = own
    for sts in by("StatefulSet", children(body)).values():
        assert sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
        env, container = env_of(sts)
        assert env["TFJOB_GRACE_PERIOD_SECONDS"] == str(grace)
        assert [e["name"] for e in container["env"]].count("TFJOB_GRACE_PERIOD_SECONDS") == 1
    _, warnings = check_additions(parse_spec(body["spec"]))
    assert any("TFJOB_GRACE_PERIOD_SECONDS is set by the operator" in w for w in warnings)


def _stamps(body, **kw):
    return {
        name: sts["metadata"]["annotations"][naming.ANNOTATION_BUILT]
        for name, sts in by("StatefulSet", children(body, **kw)).items()
    }


def test_each_statefulset_is_stamped_with_a_hash_of_itself_as_built():
    """What tells a restarted operator that a job was edited while it was down: the same
    spec stamps the same, an edit stamps the edited replica type's StatefulSet alone."""
    body = tfjob(replicas={"PS": 1, "Worker": 2})
    first = _stamps(body)
    assert set(first) == {"mnist-ps", "mnist-worker"} and len(set(first.values())) == 2
    assert _stamps(body) == first
    sts = by("StatefulSet", children(body))["mnist-worker"]
    assert built_hash(sts) == first["mnist-worker"], "its own stamp is left out"

    container = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "A", "value": "1"}]
    edited = _stamps(body)
    assert edited["mnist-ps"] == first["mnist-ps"]
    assert edited["mnist-worker"] != first["mnist-worker"]
    assert _stamps(body, scaled_down=True)["mnist-ps"] != first["mnist-ps"]


def _worker(body):
    return body["spec"]["tfReplicaSpecs"]["Worker"]


def _image(body):
    _worker(body)["template"]["spec"]["containers"][0]["image"] = "trainer:2"


def _ttl(body):
    body["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 60, "backoffLimit": 9}


def _workers(body):
    _worker(body)["replicas"] = 3


def _grace(body):
    body["spec"]["runPolicy"] = {"terminationGracePeriodSeconds": 30}


def _checkpoint(body):
    body["spec"]["checkpoint"] = {"claimName": "ckpt"}


def _hashes(body, domain="cluster.local", gang=None):
    objs = desired_children(JOB, parse_spec(body["spec"]), domain, gang=gang)
    return {
        name: s["spec"]["template"]["metadata"]["annotations"][naming.ANNOTATION_SPEC_HASH]
        for name, s in by("StatefulSet", objs).items()
    }


@pytest.mark.parametrize(
    ("edit", "domain", "gang", "rolled"),
    [
        pytest.param(None, "cluster.local", None, set(), id="same-spec"),
        pytest.param(_image, "cluster.local", None, {"mnist-worker"}, id="a-workers-image"),
        pytest.param(_workers, "cluster.local", None, {"mnist-ps", "mnist-worker"}, id="resize"),
        pytest.param(_grace, "cluster.local", None, {"mnist-ps", "mnist-worker"}, id="grace"),
        pytest.param(_checkpoint, "cluster.local", None, {"mnist-worker"}, id="checkpoint"),
        pytest.param(_ttl, "cluster.local", None, set(), id="run-policy-no-pod-reads"),
        # The operator's own settings: a new rendering, no user change.
        pytest.param(None, "example.org", None, set(), id="operator-cluster-domain"),
        pytest.param(
            None, "cluster.local", Gang(Scheduler.VOLCANO), set(), id="operator-gang-scheduler"
        ),
    ],
)
def test_the_spec_hash_changes_with_what_the_user_wrote_into_a_pod_only(edit, domain, gang, rolled):
    """A pod rolls when its template's spec hash changes (`lifecycle.restart`): for a change
    of the user's that reaches its replica type's pods, not for the operator's own."""
    body = tfjob(replicas={"PS": 1, "Worker": 2})
    before = _hashes(body)
    if edit is not None:
        edit(body)
    after = _hashes(body, domain, gang)
    assert {name for name in before if before[name] != after[name]} == rolled
    assert set(after) == {"mnist-ps", "mnist-worker"} and len(set(after.values())) == 2
