"""The Katib Experiment in manifests/examples/katib/: each trial it would make is a TFJob the
operator runs, with flags the trainer takes, and Katib reads it the way the template says.
(tests/node/test_katib_search.py runs it with Katib itself.)"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
import yaml

from tfjob_operator.rules import kubeflow
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_testbed.core.paths import ROOT
from tfjob_trainer import options

EXPERIMENT = ROOT / "manifests" / "examples" / "katib" / "tfjob-experiment.yaml"
NOW = datetime(2026, 11, 25, tzinfo=UTC)


def trial(values: dict[str, str]) -> dict:
    """The trial's TFJob as Katib renders it: ${trialParameters.X} replaced by its value."""
    experiment = yaml.safe_load(EXPERIMENT.read_text())
    text = yaml.safe_dump(experiment["spec"]["trialTemplate"]["trialSpec"])
    text = re.sub(r"\$\{trialParameters\.(\w+)\}", lambda m: values[m.group(1)], text)
    body = yaml.safe_load(text)
    body["metadata"] = {"name": "mnist-tfjob-abc123", "namespace": "team-a", "uid": "u"}
    return body


def test_every_trial_is_a_valid_tfjob_of_kubeflows_group():
    body = trial({"learningRate": "0.004", "batchSize": "64"})
    assert body["apiVersion"] == "kubeflow.org/v1"
    view = JobView.from_body(body)
    assert view.spec is not None, view.problems
    for rs in view.spec.replicas().values():
        (container,) = rs.template["spec"]["containers"]
        opts = options.parse(container["args"])
        assert (opts.learning_rate, opts.batch_size) == (0.004, 64)


# What Katib's Experiment defaulting gives a trial whose kind is TFJob, of either group
# (pkg/apis/controller/experiments/v1beta1: DefaultKubeflowJobPrimaryPodLabels).
KATIB_PRIMARY = {kubeflow.JOB_ROLE: kubeflow.MASTER_ROLE}


def test_it_is_written_as_for_training_operator_with_katibs_defaults():
    """No collector, primary pod labels, conditions or cleanPodPolicy of its own."""
    spec = yaml.safe_load(EXPERIMENT.read_text())["spec"]
    assert "metricsCollectorSpec" not in spec
    template = spec["trialTemplate"]
    assert not {"primaryPodLabels", "successCondition", "failureCondition"} & template.keys()
    assert "cleanPodPolicy" not in template["trialSpec"]["spec"].get("runPolicy", {})
    assert template["primaryContainerName"] == "tensorflow"


def _primary(body: dict) -> list[tuple[str, str]]:
    """(StatefulSet, how its primary pod gets Katib's labels): in its template, or as pod 0
    is made (`kubeflow.label_policies`)."""
    decision = decide(JobView.from_body(body), [], NOW, "")
    found = []
    for c in decision.children:
        if c["kind"] != "StatefulSet":
            continue
        meta = c["spec"]["template"]["metadata"]
        if KATIB_PRIMARY.items() <= meta["labels"].items():
            found.append((c["metadata"]["name"], "template"))
        elif meta.get("annotations", {}).get(kubeflow.FIRST_ROLE) == kubeflow.MASTER_ROLE:
            found.append((c["metadata"]["name"], "pod 0"))
    return found


def test_the_primary_pod_is_the_chiefs_or_worker_0s():
    body = trial({"learningRate": "1", "batchSize": "1"})
    assert _primary(body) == [("mnist-tfjob-abc123-chief", "template")]
    replicas = body["spec"]["tfReplicaSpecs"]
    replicas["Worker"]["replicas"] = 2
    del replicas["Chief"]
    assert _primary(body) == [("mnist-tfjob-abc123-worker", "pod 0")]


@pytest.mark.parametrize(("experiment", "valid"), [("e" * 36, True), ("e" * 37, False)])
def test_a_trials_name_is_the_experiments_and_nine_characters(experiment, valid):
    """Katib names a trial's TFJob `<experiment>-<8 characters>`: with a Worker, the
    Experiment's name may have 36 characters (docs/katib.md); one more fails every trial with
    the limit named."""
    body = trial({"learningRate": "0.01", "batchSize": "32"})
    body["metadata"]["name"] = f"{experiment}-abcd1234"
    view = JobView.from_body(body)
    assert (view.spec is not None) == valid, view.problems
    if not valid:
        assert "52" in " ".join(view.problems), view.problems
