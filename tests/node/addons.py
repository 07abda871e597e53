"""What some node tests add to the session's cluster, installed once per run by the first test
that needs it, not once per module: the chart's second release serving Kubeflow's group, and
Kueue (reconfigured by a helm upgrade only where a test needs another configuration). Both go
before a second node joins (the two-node tests never see them) and at the session's end."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tests.node.cluster_reads import established
from tfjob_operator.api.spec import KUBEFLOW_GROUP, PLURAL, VERSION
from tfjob_testbed.addons import katib, kueue_install
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.nodes.node import NodeError
from tfjob_testbed.operator_cluster import CHART, OperatorCluster

KUBEFLOW_RELEASE = "tfjob-kubeflow"
KUBEFLOW_NAMESPACE = "tfjob-kubeflow"
KUBEFLOW_CRD = f"{PLURAL}.{KUBEFLOW_GROUP}"
KUBEFLOW_API_VERSION = f"{KUBEFLOW_GROUP}/{VERSION}"
GONE_WAIT = 120
_UNKNOWN: Any = object()  # Kueue's configuration while an install or upgrade goes through


@contextlib.contextmanager
def kubeflow_release(cluster: OperatorCluster) -> Iterator[str]:
    """The chart installed again, serving kubeflow.org, with the images of the first release
    (the chart's defaults); uninstalled afterwards, with its CRD when it brought it."""
    had_crd = bool(cluster.get("crd", KUBEFLOW_CRD))
    # A release namespace still going from an earlier run takes no new release.
    wait_for(
        lambda: not cluster.get("namespace", KUBEFLOW_NAMESPACE),
        GONE_WAIT,
        f"namespace {KUBEFLOW_NAMESPACE} of an earlier run gone",
    )
    crds = ["--set", "crds.install=false"] if had_crd else []
    try:
        cluster.helm(
            "install", KUBEFLOW_RELEASE, str(CHART), "--namespace", KUBEFLOW_NAMESPACE,
            "--create-namespace", "--set", f"apiGroup={KUBEFLOW_GROUP}", *crds, "--wait",
            "--timeout", "5m",
        )  # fmt: skip
        cluster.kubectl(
            "wait", "--for=condition=Available", "deployment", "--all", "-n", KUBEFLOW_NAMESPACE,
            "--timeout=120s",
        )  # fmt: skip
        wait_for(lambda: established(cluster, KUBEFLOW_CRD), 60, f"CRD {KUBEFLOW_CRD} established")
        yield KUBEFLOW_NAMESPACE
    finally:
        with contextlib.suppress(NodeError):  # an install that failed may have left nothing
            cluster.helm("uninstall", KUBEFLOW_RELEASE, "--namespace", KUBEFLOW_NAMESPACE)
        cluster.kubectl("delete", "namespace", KUBEFLOW_NAMESPACE, "--wait=false", check=False)
        if not had_crd:
            cluster.kubectl("delete", "crd", KUBEFLOW_CRD, "--timeout=120s", check=False)
            # kubectl caches the API's resources on disk: with kubeflow.org's TFJobs still in
            # that cache, a later `kubectl get tfjob` could go to the group that is gone.
            wait_for(
                lambda: (
                    KUBEFLOW_CRD
                    not in cluster.kubectl(
                        "api-resources", "-o", "name", check=False
                    ).stdout.split()
                ),
                60,
                f"{KUBEFLOW_CRD} gone from kubectl's discovery",
            )


class Addons:
    """The session's add-ons: each installed at its first use, all removed together (the last
    installed first)."""

    def __init__(self, cluster: OperatorCluster) -> None:
        self.cluster = cluster
        self._installed = contextlib.ExitStack()
        self._kubeflow: str | None = None
        self._kueue: dict[str, Any] | None = None  # the configuration's `extra`, once installed
        self._katib = False

    def kubeflow(self) -> str:
        """The kubeflow.org release's namespace, installed if it is not."""
        if self._kubeflow is None:
            self._kubeflow = self._installed.enter_context(kubeflow_release(self.cluster))
        return self._kubeflow

    def kueue(self, extra: dict[str, Any]) -> None:
        """Kueue running with the chart's configuration plus `extra`: installed, or upgraded
        when it runs with another."""
        if self._kueue == extra:
            return
        if self._kueue is None:
            self._installed.callback(kueue_install.uninstall, self.cluster)
        self._kueue = _UNKNOWN
        kueue_install.install(self.cluster, extra)
        self._kueue = extra

    def katib(self) -> None:
        """Katib running, after Kubeflow's release: Katib's controller watches the trial
        resources whose CRDs exist when it starts."""
        self.kubeflow()
        if not self._katib:
            self._installed.callback(katib.uninstall, self.cluster)
            katib.install(self.cluster)
            self._katib = True

    def remove(self) -> None:
        self._installed.close()
        self._kubeflow = self._kueue = None
        self._katib = False
