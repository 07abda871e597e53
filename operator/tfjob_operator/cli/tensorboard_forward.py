"""`tfjob tensorboard`: a job's TensorBoard on a local port, through the API server (what
`kubectl port-forward` does)."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from typing import TextIO

from tfjob_operator.api.spec import KIND
from tfjob_operator.cli.connection import CliError, Connection
from tfjob_operator.rules import naming
from tfjob_operator.rules import tensorboard as tb

TENSORBOARD_WAIT_SECONDS = 120  # for a TensorBoard pod that is starting


def tensorboard(cluster: Connection, name: str, port: int, out: TextIO) -> int:
    job = cluster.job(name)
    board = (job.get("status") or {}).get("tensorboard")
    if not board:
        raise CliError(
            f"{KIND} {name} has no TensorBoard: add `tensorboard: {{}}` to its spec (with a "
            "checkpoint volume) and re-create it"
        )
    pod = _tensorboard_pod(cluster, name)
    forward = PortForward(cluster, pod, tb.PORT, port)
    print(
        f"TensorBoard of {cluster.namespace}/{name}: http://127.0.0.1:{forward.port}/ "
        f"(through pod {pod}; Ctrl-C stops)",
        file=out,
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        forward.serve()
    return 0


def _tensorboard_pod(cluster: Connection, job: str) -> str:
    """A running pod of the job's TensorBoard, waiting for one that is starting."""
    selector = f"{naming.LABEL_JOB_NAME}={job},{naming.LABEL_COMPONENT}={tb.COMPONENT}"
    deadline = time.monotonic() + TENSORBOARD_WAIT_SECONDS
    while True:
        pods = cluster.call(
            "list pods",
            cluster.core.list_namespaced_pod,
            cluster.namespace,
            label_selector=selector,
        ).items
        running: list[str] = [p.metadata.name for p in pods if p.status.phase == "Running"]
        if running:
            return running[0]
        if time.monotonic() > deadline:
            raise CliError(
                f"the TensorBoard of {job} has no running pod after {TENSORBOARD_WAIT_SECONDS}s"
            )
        time.sleep(1)


class PortForward:
    """A local port that reaches one pod's port through the API server, one websocket per
    connection (what `kubectl port-forward` does)."""

    def __init__(self, cluster: Connection, pod: str, remote: int, local: int) -> None:
        self.cluster, self.pod, self.remote = cluster, pod, remote
        self.server = socket.create_server(("127.0.0.1", local))
        self.port = self.server.getsockname()[1]

    def serve(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        from kubernetes.stream import portforward

        try:
            forward = portforward(
                self.cluster.core.connect_get_namespaced_pod_portforward,
                self.pod,
                self.cluster.namespace,
                ports=str(self.remote),
            )
            remote = forward.socket(self.remote)
        except Exception as e:  # the pod went: this connection fails, the next may not
            print(f"tfjob: port-forward to {self.pod} failed: {e}", file=sys.stderr, flush=True)
            conn.close()
            return
        done = threading.Event()

        def pump(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            done.set()

        threading.Thread(target=pump, args=(conn, remote), daemon=True).start()
        threading.Thread(target=pump, args=(remote, conn), daemon=True).start()
        done.wait()
        for s in (conn, remote):
            with contextlib.suppress(OSError):
                s.close()
        with contextlib.suppress(Exception):
            forward.close()
