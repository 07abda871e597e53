"""The client-side rate limits of `operator_scale.py`'s controllers, from its flags: ours, the
training-operator's and kube-controller-manager's, and the words a comparison's title gives them.

Together because `--shipped`, `--kube-api-qps` and `--operator-src` decide them all at once."""

from __future__ import annotations

import argparse

import yaml

from tfjob_testbed.operator_cluster import CHART


def chart_limit() -> tuple[str, str]:
    """The client limit the chart installs the operator with (`kubeApi`): qps, burst."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["kubeApi"]
    return str(values["qps"]), str(values["burst"])


def operator_limit(args: argparse.Namespace) -> list[str]:
    """Our operator's client limit: the chart's values (--shipped), or --kube-api-qps."""
    if args.shipped:
        qps, burst = chart_limit()
        return [f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"]
    if args.operator_src:
        return []  # an older checkout has no rate limit to turn off
    return [f"--kube-api-qps={args.kube_api_qps}"]


def peer_limit(args: argparse.Namespace) -> list[str]:
    """training-operator's client limit: its own defaults (--shipped), or none unless
    --kube-api-qps asks for one. Its limit is a token bucket, where 0 would block, so "none" is
    one that never binds."""
    if args.shipped:
        return []
    unlimited = args.kube_api_qps in ("0", "")
    qps = "1000000" if unlimited else args.kube_api_qps
    burst = "1000000" if unlimited else str(max(30, int(float(qps) * 1.5)))
    return [f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"]


def controller_manager_limit(args: argparse.Namespace) -> list[str]:
    """kube-controller-manager's client limit: its default (20/s, 30 at once) unless
    --kcm-api-qps raises it (its burst then 1.5 times that); and its StatefulSet workers."""
    syncs = (
        []
        if args.kcm_statefulset_syncs is None
        else [f"--concurrent-statefulset-syncs={args.kcm_statefulset_syncs}"]
    )
    if args.kcm_api_qps is None:
        return syncs
    qps = args.kcm_api_qps
    return [f"--kube-api-qps={qps:g}", f"--kube-api-burst={max(30, int(qps * 1.5))}", *syncs]


def limits(args: argparse.Namespace) -> str:
    """The client limits of a comparison, for its title."""
    kcm = (
        "kube-controller-manager at its default 20/s"
        if args.kcm_api_qps is None
        else f"kube-controller-manager --kube-api-qps={args.kcm_api_qps:g}"
    )
    if args.kcm_statefulset_syncs is not None:
        kcm += f", --concurrent-statefulset-syncs={args.kcm_statefulset_syncs}"
    if args.shipped:
        qps, burst = chart_limit()
        return (
            f"both controllers as shipped: ours at the chart's {qps}/s (burst {burst}), "
            f"training-operator at its own defaults; {kcm}"
        )
    if args.kube_api_qps in ("0", ""):
        return f"no client-side limit on either controller; {kcm}"
    return f"both controllers at client QPS {args.kube_api_qps}; {kcm}"
