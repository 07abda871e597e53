"""The operator at scale: 1000 TFJobs, a burst of 100, every API request, and its idle cost.

On one real control plane (the API server's audit log keeps every request with its client's user
agent), with the operator as its own process:

1. a burst of `--burst` TFJobs created at once: p50/p99 from each create to its 4 children;
2. `--jobs` TFJobs created at once: time until every child is in place, the operator's CPU and
   RSS meanwhile;
3. every pod of both sets reported Running, then worker 0 exiting 0, as a kubelet would: each
   job goes Succeeded and the operator scales it down;
4. `--idle` seconds with every job finished: the operator's requests (the target is none), CPU
   and RSS;
5. the operator stopped, a bare client loop creates the same children for `--jobs` jobs on the
   same API server: the floor;
6. (unless `--no-peer`; run between steps 4 and 5, so that no work the bare loop leaves to the
   controller-manager falls into it) the same `--jobs` TFJobs in `kubeflow.org/v1`, through
   Kubeflow's training-operator v1.9.4 (`tfjob_testbed.addons.peer`) on its own CRD in namespace
   `peer`, then through the operator with `--api-group kubeflow.org --namespace ours` on the
   operator's CRD (which replaces Kubeflow's in place, as a user moving over does), one after
   the other, each once the controller-manager has settled: from the first create until every
   pod exists and then through the same lifecycle as step 3, the controller's CPU, RSS and
   requests, and the CPU of kube-apiserver, kube-controller-manager and etcd.

Then it prints tables, among them the operator's requests per job from create to Succeeded, by
verb and resource. Run: `python benchmarks/operator_scale.py --jobs 1000`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from create_jobs import add_qps_argument, run_bare
from scale_limits import controller_manager_limit, limits, operator_limit
from scale_report import comparison_tables, operator_tables
from scale_run import audited_plane, compare, operator_steps


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags: sizes, the steps to run, and the controllers' client limits."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle to watch")
    parser.add_argument(
        "--no-lifecycle",
        action="store_true",
        help="stop after the creation phases (steps 3 and 4 skipped): at several thousand jobs "
        "the controller-manager's own 20 requests/s make their pods for most of an hour",
    )
    parser.add_argument(
        "--operator-src",
        type=Path,
        help="run the operator package from this directory (another checkout's operator/), "
        "to measure two versions on equal terms",
    )
    parser.add_argument(
        "--no-peer",
        action="store_true",
        help="skip step 6, the same jobs through Kubeflow's training-operator and through ours "
        "on kubeflow.org",
    )
    parser.add_argument(
        "--peer-threads",
        type=int,
        default=1,
        help="training-operator's --controller-threads (default 1, its own default and what "
        "its manifests run)",
    )
    parser.add_argument(
        "--comparison-only",
        action="store_true",
        help="run step 6 alone: the same jobs through training-operator and through ours",
    )
    parser.add_argument(
        "--shipped",
        action="store_true",
        help="both controllers with the client limits they ship with: ours the chart's values, "
        "training-operator its own defaults (instead of --kube-api-qps)",
    )
    parser.add_argument(
        "--kcm-api-qps",
        type=float,
        help="kube-controller-manager's --kube-api-qps (its burst 1.5 times that); default: its "
        "own, 20, which its StatefulSet controller shares with every other controller in it",
    )
    parser.add_argument(
        "--kcm-statefulset-syncs",
        type=int,
        help="kube-controller-manager's --concurrent-statefulset-syncs (default: its own, 5): "
        "how many StatefulSets it makes pods for at once",
    )
    add_qps_argument(parser)
    return parser


def main() -> None:
    """The steps on one control plane, step 6 before the bare loop; the tables once it is
    down (--comparison-only prints its own while it is up)."""
    args = build_parser().parse_args()
    operator_args = ["--log-level=info", *operator_limit(args)]
    operator_env = {}
    if args.operator_src:
        operator_env["PYTHONPATH"] = str(args.operator_src.resolve())
    with audited_plane("tfjob-scale-", controller_manager_limit(args)) as (
        work,
        plane,
        kubectl,
        api,
    ):
        if args.comparison_only:
            peers = compare(plane, kubectl, api, work, args, operator_args, operator_env)
            comparison_tables(peers, args.jobs, limits(args))
            return
        run = operator_steps(plane, kubectl, api, work, args, operator_args, operator_env)
        peers = None
        if not args.no_peer:
            # Before the bare loop: the controller-manager would make the pods of its
            # StatefulSets (and their Services' EndpointSlices) for minutes, inside the phases.
            peers = compare(plane, kubectl, api, work, args, operator_args, operator_env)
        bare = run_bare(api, kubectl, args.jobs, "bare")
    operator_tables(args, run, bare)
    if peers:
        comparison_tables(peers, args.jobs, limits(args))


if __name__ == "__main__":
    main()
