"""The tables `operator_scale.py` prints: the burst, the jobs beside a bare client loop, the
operator process, its requests per job by verb and resource, and ours beside Kubeflow's
training-operator.

Printed once the control plane is down, from what `scale_run.py` returned."""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

from create_jobs import pct
from scale_measure import PODS_PER_JOB, what
from scale_run import Finished, OperatorRun

from tfjob_testbed.addons import peer

VERSION_PEER = peer.version().removeprefix("v")


def table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n{title}")
    print(f"{'measure'.ljust(width)} | value")
    print(f"{'-' * width}-|-{'-' * 24}")
    for k, v in rows:
        print(f"{k.ljust(width)} | {v}")


def per_job_table(
    events: list[dict[str, Any]],
    namespaces: dict[str, int],
    span: str = "from create to Succeeded and scaled down",
    who: str = "Operator",
) -> None:
    """Requests per job by verb and resource: those on the jobs' namespaces, per job; the
    cluster-wide ones (watches, lists) as counts."""
    jobs = sum(namespaces.values())
    scoped: Counter[tuple[str, str]] = Counter()
    wide: Counter[tuple[str, str]] = Counter()
    for e in events:
        ns = (e.get("objectRef") or {}).get("namespace")
        if ns in namespaces:
            scoped[what(e)] += 1
        elif ns is None:
            wide[what(e)] += 1
    print(f"\n{who} requests {span} ({jobs} jobs)")
    print(f"{'verb':<8} | {'resource':<24} | {'total':>6} | per job")
    print(f"{'-' * 8}-|-{'-' * 24}-|-{'-' * 6}-|--------")
    for (verb, res), count in sorted(scoped.items()):
        print(f"{verb:<8} | {res:<24} | {count:>6} | {count / jobs:.2f}")
    total = sum(scoped.values())
    writes = sum(c for (v, _), c in scoped.items() if v in {"create", "patch", "update", "delete"})
    print(f"{'all':<8} | {'':<24} | {total:>6} | {total / jobs:.2f}  (writes {writes / jobs:.2f})")
    for (verb, res), count in sorted(wide.items()):
        print(f"{verb:<8} | {res + ' (cluster-wide)':<24} | {count:>6} |")


def table3(title: str, heads: tuple[str, str], rows: list[tuple[str, str, str]]) -> None:
    width = max(len(k) for k, _, _ in rows)
    left = max(len(heads[0]), *(len(a) for _, a, _ in rows))
    print(f"\n{title}")
    print(f"{'measure'.ljust(width)} | {heads[0].ljust(left)} | {heads[1]}")
    print(f"{'-' * width}-|-{'-' * left}-|-{'-' * max(len(heads[1]), 24)}")
    for k, a, b in rows:
        print(f"{k.ljust(width)} | {a.ljust(left)} | {b}")


def writes_per_job(events: list[dict[str, Any]], ns: str, n: int) -> str:
    mine = [e for e in events if (e.get("objectRef") or {}).get("namespace") == ns]
    writes = sum(1 for e in mine if e["verb"] in {"create", "patch", "update", "delete"})
    return f"{len(mine) / n:.2f} ({writes / n:.2f})"


def comparison_tables(results: dict[str, dict[str, Any]], n: int, limit: str) -> None:
    ours, theirs = results["ours"], results["peer"]

    def both(fmt: Callable[[dict[str, Any]], str]) -> tuple[str, str]:
        return fmt(ours), fmt(theirs)

    def cpu(who: str) -> Callable[[dict[str, Any]], str]:
        return lambda r: f"{r['cpu_pods'][who]:.1f} / {r['cpu'][who]:.1f} s"

    rows = [
        ("CRD tfjobs.kubeflow.org", "ours (tfjob_operator.api.crd)", f"Kubeflow's v{VERSION_PEER}"),
        ("pods made by", "kube-controller-manager (StatefulSets)", "the controller (bare pods)"),
        (f"all {n} jobs' {n * PODS_PER_JOB} pods exist", *both(lambda r: f"{r['pods']:.1f} s")),
        ("create -> pods p50", *both(lambda r: f"{statistics.median(r['latencies']):.2f} s")),
        ("create -> pods p99", *both(lambda r: f"{pct(r['latencies'], 99):.2f} s")),
        (
            "pods Running -> Succeeded, cleaned, quiet",
            *both(lambda r: f"{r['lifecycle']:.1f} s"),
        ),
        ("whole phase (wall)", *both(lambda r: f"{r['wall']:.1f} s")),
        ("controller CPU: create -> pods / whole", *both(cpu("controller"))),
        (
            "controller RSS: start / pods / end (peak)",
            *both(lambda r: "{:.0f} / {:.0f} / {:.0f} ({:.0f}) MiB".format(*r["rss"])),
        ),
        (
            "controller requests per job (writes)",
            writes_per_job(ours["requests"], "ours", n),
            writes_per_job(theirs["requests"], "peer", n),
        ),
        (
            "kube-controller-manager requests per job",
            writes_per_job(ours["kcm_requests"], "ours", n),
            writes_per_job(theirs["kcm_requests"], "peer", n),
        ),
        ("kube-apiserver CPU: create -> pods / whole", *both(cpu("kube-apiserver"))),
        (
            "kube-controller-manager CPU: create -> pods / whole",
            *both(cpu("kube-controller-manager")),
        ),
        ("etcd CPU: create -> pods / whole", *both(cpu("etcd"))),
        (
            "controller + apiserver + controller-manager + etcd CPU",
            *both(lambda r: f"{sum(r['cpu'].values()):.1f} s"),
        ),
    ]
    table3(
        f"ours beside Kubeflow training-operator v{VERSION_PEER}: {n} TFJobs (PS=1, Worker=2; "
        f"kubeflow.org/v1, cleanPodPolicy Running) created at once, one controller after the "
        f"other ({limit})",
        ("ours", "training-operator"),
        rows,
    )
    per_job_table(ours["requests"], {"ours": n}, "from create to Succeeded", "Ours (kubeflow.org)")
    per_job_table(theirs["requests"], {"peer": n}, "from create to Succeeded", "training-operator")


def operator_tables(args: argparse.Namespace, run: OperatorRun, bare: dict[str, Any]) -> None:
    """Steps 1 to 5: the burst, the jobs beside the bare loop, the operator process and its
    requests per job (up to the children alone with --no-lifecycle)."""
    creation_tables(args, run, bare)
    if run.finished is None:
        jobs = args.jobs + args.burst
        table(
            f"Operator process (RSS, CPU seconds from /proc; {jobs} jobs created, no pod yet)",
            creating_rows(args, run),
        )
        per_job_table(run.requests, run.namespaces, "from create to children")
        return
    process_table(args, run, run.finished)
    if run.finished.idle_requests:
        idle = Counter(what(e) for e in run.finished.idle_requests)
        print("idle requests:", idle.most_common(10))
    per_job_table(run.requests, run.namespaces)


def creation_tables(args: argparse.Namespace, run: OperatorRun, bare: dict[str, Any]) -> None:
    """Steps 1, 2 and 5: create to children, for the burst and for the jobs beside the floor."""
    burst, scale, n = run.burst, run.scale, args.jobs
    table(
        f"{args.burst} TFJobs (PS=1, Worker=2) created at once",
        [
            ("create -> children p50", f"{statistics.median(burst['latencies']):.3f} s"),
            ("create -> children p99", f"{pct(burst['latencies'], 99):.3f} s"),
            ("create -> children max", f"{max(burst['latencies']):.3f} s"),
            (f"all {args.burst} jobs' children", f"{burst['total']:.2f} s"),
        ],
    )
    table(
        f"{n} TFJobs created at once ({n * 4} children), beside a bare client loop",
        [
            (f"operator: all {n} jobs' children", f"{scale['total']:.2f} s"),
            ("operator: create -> children p50", f"{statistics.median(scale['latencies']):.2f} s"),
            ("operator: create -> children p99", f"{pct(scale['latencies'], 99):.2f} s"),
            (f"bare loop: all {n} jobs' children", f"{bare['total']:.2f} s"),
            ("ratio operator / bare", f"{scale['total'] / bare['total']:.2f}x"),
        ],
    )


def creating_rows(args: argparse.Namespace, run: OperatorRun) -> list[tuple[str, str]]:
    """The operator process's rows up to the jobs created, which both its tables begin with."""
    n, empty, created = args.jobs, run.empty, run.created
    return [
        ("RSS with no job", f"{empty['rss']:.0f} MiB"),
        (
            f"creating {n} jobs: CPU / wall",
            f"{created['cpu']:.1f} / {created['wall']:.1f} s",
        ),
        (f"RSS after creating {n}", f"{created['rss']:.0f} MiB"),
    ]


def process_table(args: argparse.Namespace, run: OperatorRun, finished: Finished) -> None:
    """The operator process through the jobs' lifecycle and the idle window after."""
    jobs = args.jobs + args.burst
    lifetime, idled = finished.lifetime, finished.idled
    table(
        f"Operator process (RSS, CPU seconds from /proc; {jobs} jobs in the end)",
        [
            *creating_rows(args, run),
            (
                "pods Running -> Succeeded -> scaled down: CPU / wall",
                f"{lifetime['cpu']:.1f} / {lifetime['wall']:.1f} s",
            ),
            (f"idle {args.idle:.0f} s, {jobs} finished jobs: CPU", f"{idled['cpu']:.2f} s"),
            (f"RSS idle with {jobs} finished jobs", f"{idled['rss']:.0f} MiB"),
            ("peak RSS", f"{idled['peak']:.0f} MiB"),
            (f"requests while idle {args.idle:.0f} s", str(len(finished.idle_requests))),
        ],
    )
