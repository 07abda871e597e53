"""The Katib Experiment in manifests/examples/katib/: each trial it would make is a TFJob the
operator runs, with flags the trainer takes, and Katib reads it the way the template says.
(tests/node/test_katib.py runs it with Katib itself.)"""

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


def test_the_primary_pod_is_the_chiefs_and_its_container_is_tensorflow():
    experiment = yaml.safe_load(EXPERIMENT.read_text())
    template = experiment["spec"]["trialTemplate"]
    decision = decide(
        JobView.from_body(trial({"learningRate": "1", "batchSize": "1"})), [], NOW, ""
    )
    primary = [
        c["metadata"]["name"]
        for c in decision.children
        if c["kind"] == "StatefulSet"
        and template["primaryPodLabels"].items()
        <= c["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert primary == ["mnist-tfjob-abc123-chief"]
    assert template["primaryPodLabels"] == {kubeflow.JOB_ROLE: kubeflow.MASTER_ROLE}
    assert template["primaryContainerName"] == "tensorflow"
    assert 'type=="Succeeded"' in template["successCondition"]


def test_the_chief_writes_the_file_katibs_collector_reads():
    experiment = yaml.safe_load(EXPERIMENT.read_text())
    collector = experiment["spec"]["metricsCollectorSpec"]
    assert collector["collector"]["kind"] == "File"
    path = collector["source"]["fileSystemPath"]["path"]
    body = trial({"learningRate": "0.01", "batchSize": "32"})
    chief = body["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    assert str(options.parse(chief["args"]).metrics_file) == path


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
