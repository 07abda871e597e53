"""The TFJob lifecycle as one pure function: (job, observed pods, now) -> what to do.

StatefulSet pods always restart, so the operator implements the TFJob semantics itself from the
containers' exits: success policy, restartPolicy per replica, backoffLimit, activeDeadlineSeconds,
suspend, cleanPodPolicy and ttlSecondsAfterFinished. The same rules serve any runner that can
report pods the same way.

Which file answers which question:

- `decision`: what does one reconcile decide, in what order? (`decide`, `Decision`, `finish`)
- `view`: what is the TFJob as read, and when is its spec invalid? (`JobView`, `read_spec`)
- `observation`: what did this reconcile see? (`Observation`: pods, StatefulSets, queue, now)
- `change`: how does a rule's verdict reach the status? (`Change`, written by the decision)
- `exits`: what do exits, restarts and lost pods count for? (restartPolicy, the ledger)
- `stops`: why did pods stop on request, and from which step does the job resume? (lastStop)
- `limits`: where are successPolicy, backoffLimit, activeDeadlineSeconds, cleanPodPolicy and
  ttlSecondsAfterFinished enforced?
- `progress`: what does a running job become next: its verdict, Restarting or Running?
- `suspension`: may the job run now: suspend, and Kueue's queue, eviction and Workload?
- `waiting`: which pods cannot start, and why? (`status.waiting` and its Events)
- `owned`: which children to make, delete or label?
- `restart`: which pods must go for a new template to reach them, all at once?
"""

from tfjob_operator.rules.lifecycle.decision import Decision, decide, finish
from tfjob_operator.rules.lifecycle.view import (
    FINAL,
    INTERNAL_ERROR,
    JobView,
    lenient_run_policy,
    read_spec,
)
from tfjob_operator.rules.lifecycle.waiting import SCHEDULER_GRACE_SECONDS
from tfjob_operator.rules.restartpolicy import is_retryable

__all__ = [
    "FINAL",
    "INTERNAL_ERROR",
    "SCHEDULER_GRACE_SECONDS",
    "Decision",
    "JobView",
    "decide",
    "finish",
    "is_retryable",
    "lenient_run_policy",
    "read_spec",
]
