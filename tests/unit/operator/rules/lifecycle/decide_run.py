"""`Run`, which drives `decide` as the operator does, for the tables over the lifecycle rules
(and the rules tested through it: kueue, nodelost)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tfjob_operator.api.spec import TFJobStatus
from tfjob_operator.controller.projections import job_record
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import Decision, JobView, decide
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation
from tfjob_testbed.core.jobs import pod

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class Run:
    """Drives `decide` like the operator does: each decision's status becomes the stored one."""

    def __init__(self, body):
        self.body = body
        self.events: list[tuple[str, str, str]] = []
        self.now = T0
        self.last: Decision | None = None
        # The owned objects as the API server would hold them: (kind, name) -> replicas.
        self.cluster: dict[tuple[str, str], int] = {}

    def step(self, *pods, after: float = 1.0, **inputs) -> Decision:
        self.now += timedelta(seconds=after)
        obs = [o for o in (observe(p) for p in pods) if o is not None]
        sets = [
            StatefulSetObservation(name, f"uid-{name}", replicas=n)
            for (kind, name), n in self.cluster.items()
            if kind == "StatefulSet"
        ]
        # The rules see what the operator keeps of a TFJob, as in the operator.
        view = JobView.from_body(job_record(self.body))
        d = decide(view, obs, self.now, "cluster.local", statefulsets=sets, **inputs)
        self.body["status"] = d.status
        TFJobStatus.model_validate(d.status)  # what we write always fits the CRD schema
        self.events += d.events
        self.last = d
        for c in d.children:
            self.cluster[(c["kind"], c["metadata"]["name"])] = c["spec"].get("replicas", 0)
        for name in d.scale_down:
            self.cluster[("StatefulSet", name)] = 0
        for kind, name in d.delete_children:
            self.cluster.pop((kind, name), None)
        return d

    @property
    def status(self):
        return self.body["status"]

    def state(self):
        return st.state(self.status)

    def replicas(self, kind):
        return {name: n for (k, name), n in self.cluster.items() if k == kind}

    def reasons(self):
        return [r for _, r, _ in self.events]


def running(job, spec):
    return [pod(job, rt.lower(), i) for rt, n in spec.items() for i in range(n)]
