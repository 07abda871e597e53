"""Hyperparameter search with Katib's own controller, db-manager, goptuna suggestion service and
metrics collector (tfjob_testbed.addons.katib): the Experiment of manifests/examples/katib,
written as for training-operator (Katib's defaults: the StdOut collector, the primary pod by
its job-role label, the TFJob's own cleanPodPolicy), its trials TFJobs of either group, with a
Chief or Worker-only, run by the operator. Each sweep prints one `KATIB` line for
docs/katib.md."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.node.addons import KUBEFLOW_API_VERSION, Addons
from tests.node.cluster_reads import POD_WAIT, FollowedLog, helm_operator
from tfjob_operator.api.spec import API_VERSION
from tfjob_testbed.addons import katib
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node
EXPERIMENT = ROOT / "manifests" / "examples" / "katib" / "tfjob-experiment.yaml"
# Small data and few steps: a sweep of 4 trials, 2 at a time, on 2 shared cores.
TRIAL_ARGS = ["--dataset=digits", "--steps=120", "--log-every=20"]
SWEEP_WAIT = 800  # under the suite's 900 s a test
INJECTION = {"katib.kubeflow.org/metrics-collector-injection": "enabled"}
COLLECTOR = "metrics-logger-and-collector"  # the sidecar Katib's collectors inject
LOSS = re.compile(r"\bloss = ([0-9.]+)")
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
METRICS = "/var/log/katib/metrics.log"


@pytest.fixture(scope="module")
def katib_on(cluster: OperatorCluster, addons: Addons) -> Iterator[None]:
    """Katib running, and the operator's release granting Katib's ServiceAccount what trials
    of TFJobs need (`katib.enabled`)."""
    if cluster.node is None:
        pytest.skip("imports Katib's images into the real node's containerd (kind: load them)")
    started = time.monotonic()
    addons.katib()
    helm_operator(cluster, "katib.enabled=true")
    print(f"\nKATIB installed seconds={time.monotonic() - started:.0f}")
    try:
        yield
    finally:
        helm_operator(cluster, "katib.enabled=false")


@pytest.fixture
def trials_namespace(cluster: OperatorCluster, namespace: str, katib_on: None) -> str:
    """The test's namespace, with the label Katib's pod webhook selects namespaces by."""
    label = [f"{k}={v}" for k, v in INJECTION.items()]
    cluster.kubectl("label", "namespace", namespace, *label)
    return namespace


def experiment(
    name: str,
    api_version: str,
    algorithm: str,
    trials: int = 4,
    chief: bool = True,
    collector: str = "StdOut",
) -> dict[str, Any]:
    """The shipped Experiment: renamed, its trials of `api_version`, small, and with no goal (so
    that every trial runs); without a Chief unless `chief` (then 2 Workers); with the File
    collector, as Katib's docs write it for a file: `--metrics-file`, the primary pod by a
    template label, and `cleanPodPolicy: None`."""
    body = yaml.safe_load(EXPERIMENT.read_text())
    body["metadata"] = {"name": name}
    spec = body["spec"]
    spec["objective"].pop("goal", None)
    spec["algorithm"] = {"algorithmName": algorithm}
    spec.update(maxTrialCount=trials, parallelTrialCount=min(2, trials), maxFailedTrialCount=1)
    job = spec["trialTemplate"]["trialSpec"]
    job["apiVersion"] = api_version
    replicas = job["spec"]["tfReplicaSpecs"]
    if not chief:
        del replicas["Chief"]
        replicas["Worker"]["replicas"] = 2
    for rs in replicas.values():
        (container,) = rs["template"]["spec"]["containers"]
        kept = [a for a in container["args"] if not a.startswith(("--steps", "--log-every"))]
        container["args"] = [*kept, *TRIAL_ARGS]
    if collector == "File":
        spec["metricsCollectorSpec"] = {
            "collector": {"kind": "File"},
            "source": {"fileSystemPath": {"path": METRICS, "kind": "File", "format": "TEXT"}},
        }
        primary = "Chief" if chief else "Worker"
        replicas[primary]["template"]["spec"]["containers"][0]["args"].append(
            f"--metrics-file={METRICS}"
        )
        spec["trialTemplate"]["primaryPodLabels"] = {
            "training.kubeflow.org/replica-type": primary.lower()
        }
        job["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    return body


def condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def trials_of(cluster: OperatorCluster, name: str, namespace: str) -> list[dict[str, Any]]:
    got = cluster.get(f"trials.{katib.GROUP}", "-n", namespace, "-l", f"{EXPERIMENT_LABEL}={name}")
    return got.get("items") or []


class Watch:
    """The trials' pods as they come: each primary pod's log followed from its start (where
    its loss lines are: the collector's, which prints what StdOut's wrapper redirected, or the
    trainer's own under the File collector), which pods got Katib's sidecar, and how often
    each TensorFlow container started again."""

    def __init__(self, cluster: OperatorCluster, namespace: str, primary: str, log_of: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.primary, self.log_of = primary, log_of  # "-chief-0"/"-worker-0"; a container
        self.logs: dict[str, FollowedLog] = {}  # trial -> its primary pod's log
        self.sidecars: dict[str, bool] = {}  # pod -> whether Katib injected its collector
        self.restarts: dict[str, int] = {}  # pod -> its TensorFlow container's restartCount

    def poll(self) -> None:
        pods = self.cluster.get("pods", "-n", self.namespace)["items"]
        for pod in pods:
            name = pod["metadata"]["name"]
            containers = [c["name"] for c in pod["spec"]["containers"]]
            self.sidecars.setdefault(name, COLLECTOR in containers)
            trial = name.rsplit("-", 2)[0]
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            tf = next((c for c in statuses if c["name"] == "tensorflow"), {})
            self.restarts[name] = max(self.restarts.get(name, 0), tf.get("restartCount", 0))
            running = "running" in tf.get("state", {})
            if name.endswith(self.primary) and running and trial not in self.logs:
                log = FollowedLog(self.cluster, name, self.namespace, self.log_of)
                self.logs[trial] = log


def run_sweep(cluster: OperatorCluster, body: dict[str, Any], namespace: str) -> tuple[dict, Watch]:
    """Create the Experiment and follow it to Succeeded; its final object and what was seen."""
    name = body["metadata"]["name"]
    spec = body["spec"]
    chief = "Chief" in spec["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"]
    file = "metricsCollectorSpec" in spec
    watch = Watch(
        cluster,
        namespace,
        "-chief-0" if chief else "-worker-0",
        "tensorflow" if file else COLLECTOR,
    )
    started = time.monotonic()
    cluster.apply(body, namespace)

    def done() -> dict[str, Any] | None:
        watch.poll()
        exp = cluster.get(f"experiments.{katib.GROUP}", name, "-n", namespace)
        if condition(exp, "Failed"):
            raise AssertionError(f"{name} Failed: {exp['status']}")
        return exp if condition(exp, "Succeeded") else None

    exp = wait_for(done, SWEEP_WAIT, f"experiment {name} Succeeded", interval=1)
    print(
        f"\nKATIB experiment={name} trials={body['spec']['maxTrialCount']} "
        f"seconds={time.monotonic() - started:.0f}"
    )
    return exp, watch


def assert_sweep(cluster: OperatorCluster, body: dict[str, Any], exp: dict, watch: Watch) -> None:
    """Every trial Succeeded; the optimal trial's metric is the least loss its log shows (the
    log rounds it to 2 places); the collector went into the primary pods only; no TensorFlow
    container started twice."""
    name, namespace = body["metadata"]["name"], exp["metadata"]["namespace"]
    trials = trials_of(cluster, name, namespace)
    assert len(trials) == body["spec"]["maxTrialCount"], [t["metadata"]["name"] for t in trials]
    for trial in trials:
        assert condition(trial, "Succeeded"), trial.get("status")
    best = exp["status"]["currentOptimalTrial"]
    assert best["bestTrialName"] in {t["metadata"]["name"] for t in trials}, best
    (metric,) = [m for m in best["observation"]["metrics"] if m["name"] == "loss"]
    log = watch.logs[best["bestTrialName"]].text
    printed = LOSS.findall(log)
    assert printed, log[-2000:]
    assert f"{float(metric['min']):.2f}" == min(printed, key=float), (metric, log[-2000:])
    primaries = {p for p in watch.sidecars if p.endswith(watch.primary)}
    assert len(primaries) == len(trials), watch.sidecars
    assert {p for p, injected in watch.sidecars.items() if injected} == primaries, watch.sidecars
    assert not any(watch.restarts.values()), watch.restarts


def assert_nothing_left(cluster: OperatorCluster, name: str, namespace: str) -> None:
    """Deleting the Experiment takes its trials, their TFJobs and the TFJobs' children."""
    cluster.kubectl("delete", f"experiments.{katib.GROUP}", name, "-n", namespace,
                    "--timeout=120s")  # fmt: skip

    def left() -> list[str]:
        kinds = "statefulsets,services,pods,tfjobs.tfjob.dev,tfjobs.kubeflow.org"
        got = cluster.kubectl("get", f"{kinds},trials.{katib.GROUP}", "-n", namespace,
                              "-o", "name", check=False)  # fmt: skip
        return got.stdout.split()

    wait_for(lambda: not left(), POD_WAIT, f"{name}'s trials and their children gone")


@pytest.mark.parametrize(
    ("name", "api_version", "algorithm", "trials", "chief", "collector"),
    [
        # make test's: one trial, Worker-only (its primary pod labelled as it is made).
        pytest.param(
            "sweep-kubeflow-workers",
            KUBEFLOW_API_VERSION,
            "random",
            1,
            False,
            "StdOut",
            marks=pytest.mark.smoke,
        ),
        ("sweep-tfjob-dev-chief", API_VERSION, "tpe", 4, True, "StdOut"),
        ("sweep-kubeflow-chief", KUBEFLOW_API_VERSION, "random", 2, True, "StdOut"),
        ("sweep-tfjob-dev-workers", API_VERSION, "random", 2, False, "StdOut"),
        ("sweep-file-none", API_VERSION, "random", 2, True, "File"),
    ],
)
def test_a_sweep_finds_its_optimal_trial(
    cluster: OperatorCluster,
    trials_namespace: str,
    name: str,
    api_version: str,
    algorithm: str,
    trials: int,
    chief: bool,
    collector: str,
) -> None:
    body = experiment(name, api_version, algorithm, trials, chief, collector)
    exp, watch = run_sweep(cluster, body, trials_namespace)
    assert_sweep(cluster, body, exp, watch)
    assert_nothing_left(cluster, name, trials_namespace)


@pytest.mark.parametrize("api_version", [KUBEFLOW_API_VERSION, API_VERSION])
def test_a_trial_whose_tfjob_fails_is_failed_promptly(
    cluster: OperatorCluster, trials_namespace: str, api_version: str
) -> None:
    """A trial whose trainer refuses its flags: its TFJob Fails after its backoff, Katib marks
    the trial Failed and, with no failed trial allowed, the Experiment Failed."""
    name = f"fails-{api_version.split('.')[0].split('/')[0]}"
    body = experiment(name, api_version, "random", trials=1)
    body["spec"]["maxFailedTrialCount"] = 0
    for rs in body["spec"]["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["args"].append("--steps=-1")
    body["spec"]["trialTemplate"]["trialSpec"]["spec"]["runPolicy"]["backoffLimit"] = 0
    started = time.monotonic()
    cluster.apply(body, trials_namespace)

    def failed() -> dict[str, Any] | None:
        trials = trials_of(cluster, name, trials_namespace)
        return trials[0] if trials and condition(trials[0], "Failed") else None

    trial = wait_for(failed, POD_WAIT, f"{name}'s trial Failed", interval=1)
    took = time.monotonic() - started
    exp = wait_for(
        lambda: (
            (e := cluster.get(f"experiments.{katib.GROUP}", name, "-n", trials_namespace))
            and condition(e, "Failed")
            and e
        ),
        POD_WAIT,
        f"experiment {name} Failed",
    )
    print(f"\nKATIB failed-trial group={api_version} seconds={took:.0f}")
    assert not condition(trial, "Succeeded"), trial["status"]
    assert exp["status"]["trialsFailed"] == 1, exp["status"]
    assert_nothing_left(cluster, name, trials_namespace)
