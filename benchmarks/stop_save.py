"""How long a stop's save takes, against the size of the model: the grace period to choose.

A job stopped on request (SIGTERM) saves at the step it is on before its pods go
(docs/lifecycle.md, "Stops on request"); the pod's grace period must cover that save. This
times the trainer's own save (`output.checkpoints.Checkpoints`: step, model, optimizer with
Adam's two slots per weight, as the trainer checkpoints) for models of growing size, on one
process, into a local directory: the floor. Under parameter servers the chief reads every
variable from them first; `--ps` runs the same save through one parameter server on
127.0.0.1 (gRPC), as the chief of a PS job does.

    python benchmarks/stop_save.py [--sizes 1,10,100] [--runs 3] [--ps]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100", help="millions of weights, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ps", action="store_true", help="through one parameter server")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    server = None
    if args.ps:
        port = _free_port()
        os.environ["TF_CONFIG"] = json.dumps(
            {"cluster": {"chief": [f"127.0.0.1:{_free_port()}"], "ps": [f"127.0.0.1:{port}"],
                         "worker": [f"127.0.0.1:{_free_port()}"]},
             "task": {"type": "chief", "index": 0}}
        )  # fmt: skip
        server = [
            subprocess.Popen(
                [sys.executable, "-c", _SERVE, task, os.environ["TF_CONFIG"]],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for task in ("ps", "worker")
        ]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    from tfjob_trainer.output.checkpoints import Checkpoints

    tf.get_logger().setLevel("ERROR")  # the saver's retracing notices, one per size

    strategy = (
        tf.distribute.ParameterServerStrategy(
            tf.distribute.cluster_resolver.TFConfigClusterResolver()
        )
        if args.ps
        else tf.distribute.get_strategy()
    )
    where = "one parameter server (gRPC, 127.0.0.1)" if args.ps else "one process"
    print(f"save at a stop, {where}; {args.runs} runs each, local disk\n")
    print("| weights | checkpoint size | save min | save median | save max |")
    print("|---|---|---|---|---|")
    try:
        for millions in sizes:
            width = int((millions * 1_000_000) ** 0.5)
            with strategy.scope():
                model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(width)])
                optimizer = keras.optimizers.Adam()
                optimizer.build(model.trainable_variables)
                step = tf.Variable(0, dtype=tf.int64, trainable=False)
            times = []
            with tempfile.TemporaryDirectory() as directory:
                io = "/job:chief/replica:0/task:0/device:CPU:0" if args.ps else None
                ckpts = Checkpoints(Path(directory), step, model, optimizer, io_device=io)
                for run in range(args.runs):
                    step.assign(run + 1)
                    began = time.perf_counter()
                    ckpts.save()
                    times.append(time.perf_counter() - began)
                size = sum(f.stat().st_size for f in Path(directory).glob("ckpt-1.*"))
            print(
                f"| {width * width / 1e6:.0f} M | {size / 2**20:.0f} MiB | {min(times):.2f} s | "
                f"{statistics.median(times):.2f} s | {max(times):.2f} s |"
            )
    finally:
        for proc in server or []:
            proc.kill()


_SERVE = """
import json, sys, tensorflow as tf
task, config = sys.argv[1], json.loads(sys.argv[2])
server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=task,
                              task_index=0, protocol="grpc", start=True)
server.join()
"""

if __name__ == "__main__":
    main()
