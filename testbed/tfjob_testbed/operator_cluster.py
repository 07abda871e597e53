"""`make cluster`: a real one-node cluster on this machine (two nodes with `NODES=2`), with the
operator installed from its Helm chart and both images built from the Dockerfile, for trying
TFJobs as on any cluster.

    python -m tfjob_testbed.operator_cluster up [--nodes 2] [--kueue] [--katib]  # Ctrl-C tears down
    python -m tfjob_testbed.operator_cluster down            # from another shell, or after a crash

Ctrl-C, SIGTERM and SIGHUP all tear everything down (see `node.teardown`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tfjob_operator.api.spec import GROUP
from tfjob_testbed.addons import katib, kueue_install
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.core.reads import ReadError, Reads
from tfjob_testbed.core.signals import Interrupted, interrupt_on
from tfjob_testbed.core.tools import Tools, ensure_tools
from tfjob_testbed.images import podman
from tfjob_testbed.nodes.host import NodeError
from tfjob_testbed.nodes.node import Node, leftovers, state_dir, teardown

CHART = ROOT / "charts" / "tfjob-operator"
RELEASE = "tfjob-operator"
NAMESPACE = "tfjob-system"


@dataclass
class OperatorCluster:
    """A cluster with the operator installed from its chart: the real node here (`node`), or
    any other one (kind) reached through `kubeconfig`, where `node` is None."""

    node: Node | None
    tools: Tools
    timings: dict[str, float]
    kubeconfig: Path
    _reads: Reads | None = field(default=None, init=False, repr=False)

    @property
    def reads(self) -> Reads:
        """The API client the reads below go through (made at the first)."""
        if self._reads is None:
            self._reads = Reads(self.kubeconfig)
        return self._reads

    @classmethod
    def existing(cls, kubeconfig: Path) -> OperatorCluster:
        """A cluster brought up elsewhere (tests/e2e/kind.sh), the chart already installed."""
        return cls(None, ensure_tools(), {}, kubeconfig)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return _tool(self.tools.kubectl, self.kubeconfig, *args, check=check, input=input)

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _tool(self.tools.helm, self.kubeconfig, *args)

    def apply(self, body: dict[str, Any] | str, namespace: str) -> None:
        text = body if isinstance(body, str) else yaml.safe_dump(body)
        self.kubectl("apply", "-n", namespace, "-f", "-", input=text)

    def get(self, *args: str) -> dict[str, Any]:
        """`kubectl get ... -o json`, read through the API client where it can be; {} while the
        object does not exist."""
        try:
            answer = self.reads.get(*args)
        except ReadError as e:
            raise NodeError(f"get {' '.join(args)} failed: {e}") from None
        if answer is not None:
            return answer
        proc = self.kubectl("get", *args, "-o", "json", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return {}
            raise NodeError(f"kubectl get {' '.join(args)} failed: {proc.stderr.strip()}")
        found: dict[str, Any] = json.loads(proc.stdout)
        return found

    def tfjob_status(self, name: str, namespace: str) -> dict[str, Any]:
        job = self.get(f"tfjobs.{GROUP}", name, "-n", namespace)
        status: dict[str, Any] = job.get("status") or {}
        return status

    def logs(self, pod: str, namespace: str) -> str:
        """The pod's log; "" while it cannot be read."""
        return self.reads.logs(pod, namespace)


def _tool(
    binary: Path, kubeconfig: Path, *args: str, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=600,
        input=input,
    )
    if check and proc.returncode != 0:
        raise NodeError(f"{binary.name} {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def install_chart(cluster: OperatorCluster) -> None:
    """The chart as users install it, its own image names and tags (pulled if not present):
    returns once helm has seen its objects ready."""
    cluster.helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
        "--wait", "--timeout", "5m",
    )  # fmt: skip


def start(directory: Path | None = None, nodes: int = 1) -> OperatorCluster:
    """Images, node (and a second one if `nodes` is 2: see `Node.second`), then the chart:
    returns once the operator pod is Ready."""
    if nodes not in (1, 2):
        raise ValueError(f"{nodes} nodes: the bed has one or two")
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    tools = ensure_tools()
    built = podman.build_all()
    timings["images"] = time.monotonic() - t0
    node = Node(directory)
    node.up([image.archive for image in built])
    timings.update({f"node: {k}": v for k, v in node.timings.items()})
    cluster = OperatorCluster(node, tools, timings, node.kubeconfig)
    try:
        if nodes == 2:
            second = node.second()
            timings.update({f"node 2: {k}": v for k, v in second.timings.items()})
        t1 = time.monotonic()
        install_chart(cluster)
        cluster.kubectl(
            "wait", "--for=condition=Available", "deployment", "--all", "-n", NAMESPACE,
            "--timeout=120s",
        )  # fmt: skip
        timings["helm install to operator Ready"] = time.monotonic() - t1
    except BaseException:
        node.down()
        raise
    timings["total"] = time.monotonic() - t0
    return cluster


@contextlib.contextmanager
def running(directory: Path | None = None, nodes: int = 1) -> Iterator[OperatorCluster]:
    cluster = start(directory, nodes)
    node = cluster.node
    assert node is not None  # start() always brings up the node here
    try:
        yield cluster
    finally:
        node.down()


def _up(nodes: int = 1, with_kueue: bool = False, with_katib: bool = False) -> int:
    interrupt_on(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    holder = state_dir() / "cluster.pid"
    try:
        with running(nodes=nodes) as cluster:
            sets = []
            if with_kueue:
                kueue_install.install(cluster)
                sets += ["--set", "kueue.enabled=true"]
            if with_katib:
                katib.install(cluster)
                sets += ["--set", "katib.enabled=true"]
            if sets:
                cluster.helm(
                    "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
                    *sets, "--wait", "--timeout", "5m",
                )  # fmt: skip
            holder.write_text(str(os.getpid()))
            kubeconfig = cluster.kubeconfig
            size = {1: "one-node", 2: "two-node"}[nodes]
            print(
                f"\nA {size} cluster is up ({cluster.timings['total']:.0f} s), the operator "
                f"running from the chart in {NAMESPACE}. In another shell:\n\n"
                f"  export KUBECONFIG={kubeconfig}\n"
                f"  export PATH={cluster.tools.kubectl.parent}:$PATH\n"
                "  kubectl apply -f manifests/examples/mnist-ps.yaml\n"
                "  kubectl get tfj -w\n"
                "  kubectl logs -f mnist-ps-chief-0\n\n"
                "Ctrl-C here (or make cluster-down) removes everything.",
                flush=True,
            )
            signal.pause()
    except Interrupted as e:
        print(f"\n{e}: tearing down", flush=True)
    except NodeError as e:
        print(f"make cluster: {e}", file=sys.stderr)
        return 1
    finally:
        holder.unlink(missing_ok=True)
    left = leftovers()
    print("removed everything" if not left else f"left behind: {left}", flush=True)
    return 0 if not left else 1


def _down() -> int:
    holder = state_dir() / "cluster.pid"
    if holder.exists():
        pid = int(holder.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.2)
    teardown()
    left = leftovers()
    print("removed everything" if not left else f"left behind: {left}")
    return 0 if not left else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfjob_testbed.operator_cluster")
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument(
        "--nodes", type=int, choices=[1, 2], default=1, help="with up: one node, or two"
    )
    parser.add_argument(
        "--kueue", action="store_true", help="with up: Kueue too, and the operator's --kueue"
    )
    parser.add_argument(
        "--katib", action="store_true", help="with up: Katib too (docs/katib.md), and its access"
    )
    args = parser.parse_args(argv)
    return _up(args.nodes, args.kueue, args.katib) if args.command == "up" else _down()


if __name__ == "__main__":
    sys.exit(main())
