"""Property-based fuzzing of the running operator: every TFJob the API server accepts must get a
status condition (run, or say why), and no spec may crash the operator's code.

Specs come from two sources, collected up front with hypothesis (fixed seeds, no database, so
every run tries the same specs):

- the CRD's OpenAPI schema for `spec` (`manifests/crd.yaml`), with pod templates (free-form in
  the schema) drawn from strategies of our own, realistic and odd;
- mutations of the shipped examples and of the Kubeflow corpus (`tests/data/kubeflow`): the
  habits and mistakes of people who write Kubeflow TFJobs by hand.

Each spec is applied with `kubectl apply` on its own, to learn which ones the API server refuses
and why; then one shared deadline waits for a condition on every accepted TFJob.
`TFJOB_FUZZ_EXAMPLES` sets how many specs (default 160); `TFJOB_FUZZ_DUMP=file` writes each
spec with its outcome there (JSON lines).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tfjob_operator.api.spec import GROUP, PLURAL, VERSION
from tfjob_operator.rules import handover
from tfjob_operator.rules.lifecycle import INTERNAL_ERROR
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("TFJOB_FUZZ_EXAMPLES", "160"))
# A file to write every spec with its outcome to (JSON lines), to check fixes against.
DUMP = os.environ.get("TFJOB_FUZZ_DUMP")
SCHEMA_SHARE = 0.4  # of the specs come from the schema, the rest from mutated manifests
CONDITION_WAIT = 60  # one deadline for every accepted TFJob to get a condition
APPLY_THREADS = 4
MAX_REPLICAS = 3  # per type, so the control plane makes few pods
REPLICA_TYPES = ["Chief", "Master", "PS", "Worker", "Evaluator"]

Spec = dict[str, Any]
Draw = Callable[[st.SearchStrategy[Any]], Any]


# --- pod templates: the schema leaves them free-form, so these strategies fill them ---

_names = st.sampled_from(["tensorflow", "tensorflow", "trainer", "tensorboard", "tf_worker", ""])
_images = st.sampled_from(
    [
        "tensorflow/tensorflow:2.15.0",
        "kubeflow/tf-dist-mnist-test:1.0",
        "registry.example.com:5000/ml/train@sha256:" + "0" * 64,
        "busybox",
        "Not/A Valid:Image",
    ]
)
_quantities = st.sampled_from(
    [1, 2, 0.5, 0, -1, "500m", "1", "4Gi", "4GB", "1.5", "abc", 1e3, True, None]
)
_resource_names = st.sampled_from(
    ["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "example.com/fpga", "gpu"]
)
_resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(_resource_names, _quantities, max_size=3),
        "limits": st.dictionaries(_resource_names, _quantities, max_size=3),
    },
)
_env = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["LOG_LEVEL", "TF_CONFIG", "TF_CPP_MIN_LOG_LEVEL", "1BAD"])},
        optional={
            "value": st.one_of(st.sampled_from(["", "1", "info"]), st.integers(0, 3)),
            "valueFrom": st.just({"fieldRef": {"fieldPath": "metadata.name"}}),
        },
    ),
    max_size=3,
)
_ports = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(["tfjob-port", "grpc", "http", "TFJOB_PORT"]),
            "containerPort": st.sampled_from([2222, 3333, 6006, 0, 70000, "2222", "tfjob-port"]),
            "protocol": st.sampled_from(["TCP", "UDP", "tcp"]),
        },
    ),
    max_size=2,
)
_mounts = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["data", "logs", "missing"]),
            "mountPath": st.sampled_from(["/data", "/logs", "/checkpoints", "relative"]),
        }
    ),
    max_size=2,
)
_volumes = st.lists(
    st.sampled_from(
        [
            {"name": "data", "hostPath": {"path": "/mnt/data"}},
            {"name": "logs", "emptyDir": {}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
        ]
    ),
    max_size=2,
)
_containers = st.fixed_dictionaries(
    {"name": _names, "image": _images},
    optional={
        "command": st.sampled_from([["python", "/app/train.py"], "python train.py", [1]]),
        "args": st.sampled_from([["--steps=100"], ["--steps", 100], []]),
        "env": _env,
        "ports": _ports,
        "resources": _resources,
        "imagePullPolicy": st.sampled_from(["IfNotPresent", "Always", "Never", "always"]),
        "volumeMounts": _mounts,
        "workingDir": st.sampled_from(["/app", ""]),
    },
)
_pod_specs = st.fixed_dictionaries(
    {"containers": st.lists(_containers, min_size=1, max_size=3)},
    optional={
        "volumes": _volumes,
        "nodeSelector": st.sampled_from([{"kubernetes.io/os": "linux"}, {"gpu": True}, {}]),
        "tolerations": st.just([{"key": "nvidia.com/gpu", "operator": "Exists"}]),
        "serviceAccountName": st.sampled_from(["default", "no-such-account", "Bad_Name"]),
        "restartPolicy": st.sampled_from(["Always", "OnFailure", "Never"]),
        "schedulerName": st.just("volcano"),
        "initContainers": st.lists(_containers, max_size=1),
    },
)
_metadata = st.fixed_dictionaries(
    {},
    optional={
        "labels": st.sampled_from([{"team": "ml"}, {"version": 2}, {"bad label": "x"}]),
        "annotations": st.sampled_from(
            [{"sidecar.istio.io/inject": "false"}, {"sidecar.istio.io/inject": False}]
        ),
    },
)
_realistic_templates = st.fixed_dictionaries({"spec": _pod_specs}, optional={"metadata": _metadata})
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=5,
)
_odd_templates = st.one_of(
    st.sampled_from(
        [
            {},
            {"spec": None},
            {"spec": {}},
            {"spec": {"containers": []}},
            {"spec": {"containers": [None]}},
            {"spec": {"containers": ["tensorflow/tensorflow:2.15.0"]}},
            {"metadata": None, "spec": {"containers": [{"name": "tensorflow", "image": "x"}]}},
        ]
    ),
    _containers.map(lambda c: {"spec": {"containers": {c["name"] or "tensorflow": c}}}),
    _json.map(lambda j: {"spec": j}),
)
# Mostly realistic templates (a job has up to four, and one odd one decides its fate).
templates = st.sampled_from([*[_realistic_templates] * 7, _odd_templates]).flatmap(lambda s: s)


# --- (a) specs from the CRD's OpenAPI schema ---

INT64_MAX = 2**63 - 1
_words = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
# Kubeflow's shape for a field the CRD keeps free-form.
_FREE_FORM: dict[str, st.SearchStrategy[Any]] = {
    "schedulingPolicy": st.fixed_dictionaries(
        {},
        optional={
            "minAvailable": st.integers(-1, 5),
            "queue": st.sampled_from(["default", "", "gpu-queue"]),
            "priorityClass": _words,
            "minResources": st.dictionaries(_resource_names, _quantities, max_size=2),
            "scheduleTimeoutSeconds": st.integers(0, 600),
        },
    ),
}


def from_schema(schema: dict[str, Any], name: str = "") -> st.SearchStrategy[Any]:
    """Values that a structural schema (the subset CRDs use) accepts. Unknown fields are pruned
    by the API server, so none are made; free-form objects get a shape of their own; templates
    are left out (drawn from `templates`); replicas stay small; replica types are mostly real."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return _FREE_FORM.get(name, st.dictionaries(_words, _words, max_size=2))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object" and name == "tfReplicaSpecs" and "properties" not in schema:
        types = st.sampled_from([*REPLICA_TYPES * 4, "worker", "Launcher"])
        replica = from_schema(schema.get("additionalProperties") or {})
        return st.dictionaries(types, replica, min_size=1, max_size=4)
    if kind == "object" and "properties" in schema:
        props = {k: from_schema(v, k) for k, v in schema["properties"].items() if k != "template"}
        required = [r for r in schema.get("required", []) if r in props]
        return st.fixed_dictionaries(
            {k: props[k] for k in required},
            optional={k: v for k, v in props.items() if k not in required},
        )
    if kind == "object":
        values = schema.get("additionalProperties")
        inner = from_schema(values) if isinstance(values, dict) else _words
        return st.dictionaries(_words, inner, max_size=2)
    if kind == "array":
        return st.lists(from_schema(schema.get("items") or {}), max_size=3)
    if kind == "integer":
        top = MAX_REPLICAS if name == "replicas" else schema.get("maximum", INT64_MAX)
        return st.integers(schema.get("minimum", -INT64_MAX), top)
    if kind == "boolean":
        return st.booleans()
    if kind == "string" and "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True)
    if kind == "string":
        return st.one_of(_words, st.text(max_size=12))
    return _json


@functools.cache
def spec_strategy() -> st.SearchStrategy[Spec]:
    """Specs as the CRD's schema for `spec` (read from manifests/crd.yaml) describes them."""
    crd = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
    return from_schema(
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    )


@st.composite
def schema_specs(draw: Draw) -> tuple[str, str, Spec]:
    """A spec from the schema, with a template drawn for each replica type."""
    spec = draw(spec_strategy())
    for rs in (spec.get("tfReplicaSpecs") or {}).values():
        rs["template"] = draw(templates)
    return "schema", "", spec


# --- (b) mutations of hand-written manifests ---


@functools.cache
def base_manifests() -> list[tuple[str, Spec]]:
    """(file stem, spec) of the shipped examples and the Kubeflow corpus."""
    files = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
    files += sorted((ROOT / "tests" / "data" / "kubeflow").glob("*.yaml"))
    return [(f.stem, yaml.safe_load(f.read_text())["spec"]) for f in files]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _replica(draw: Draw, spec: Spec) -> tuple[str, Spec]:
    """A drawn replica type of the job, and its spec."""
    replicas = spec["tfReplicaSpecs"]
    rt = draw(st.sampled_from(sorted(replicas)))
    return rt, replicas[rt]


def _pod(draw: Draw, spec: Spec) -> tuple[str, dict[str, Any]]:
    """A drawn replica type's pod spec, and its path for a description."""
    rt, rs = _replica(draw, spec)
    return f"{rt}.template.spec", rs["template"]["spec"]


def _container(draw: Draw, spec: Spec) -> tuple[str, dict[str, Any]]:
    """The first container of a drawn replica type (every base manifest has one)."""
    path, pod = _pod(draw, spec)
    return f"{path}.containers[0]", pod["containers"][0]


def _set(path: str, obj: dict[str, Any], key: str, value: Any) -> str:
    obj[key] = value
    return f"{path}.{key}: {_compact(value)}"


# Each mutation changes the spec in place and says what it did, for the report.
def numeric_quantities(draw: Draw, spec: Spec) -> str:
    name, value = draw(
        st.sampled_from(
            [("cpu", 1), ("cpu", 0.5), ("memory", "4GB"), ("memory", 4), ("nvidia.com/gpu", 2)]
        )
    )
    kind = draw(st.sampled_from(["requests", "limits"]))
    path, c = _container(draw, spec)
    resources = c.setdefault("resources", {}).setdefault(kind, {})
    return _set(f"{path}.resources.{kind}", resources, name, value)


def fractional_gpu(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    limits = c.setdefault("resources", {}).setdefault("limits", {})
    return _set(
        f"{path}.resources.limits", limits, "nvidia.com/gpu", draw(st.sampled_from([0.5, "0.5"]))
    )


def gpu_request_differs(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    value = {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}
    return _set(path, c, "resources", value)


def env_as_map(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    return _set(path, c, "env", {"LOG_LEVEL": "info", "STEPS": "100"})


def ports_as_map(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    return _set(path, c, "ports", {"tfjob-port": 2222})


def port_as_string(draw: Draw, spec: Spec) -> str:
    port = draw(st.sampled_from(["2222", "tfjob-port", "3333"]))
    path, c = _container(draw, spec)
    return _set(path, c, "ports", [{"name": "tfjob-port", "containerPort": port}])


def port_without_number(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    return _set(path, c, "ports", [{"name": "tfjob-port"}])


def user_port_2222(draw: Draw, spec: Spec) -> str:
    port = draw(st.sampled_from([{"containerPort": 2222}, {"name": "grpc", "containerPort": 2222}]))
    path, c = _container(draw, spec)
    return _set(path, c, "ports", [port])


def duplicate_env(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    return _set(path, c, "env", [{"name": "MODE", "value": "a"}, {"name": "MODE", "value": "b"}])


def env_value_number(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    return _set(path, c, "env", [{"name": "BATCH_SIZE", "value": 128}])


def args_with_numbers(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    return _set(path, c, "args", ["--steps", 1000, "--lr", 0.01])


def annotation_bool(draw: Draw, spec: Spec) -> str:
    rt, rs = _replica(draw, spec)
    meta = rs["template"].setdefault("metadata", {})
    return _set(f"{rt}.template.metadata", meta, "annotations", {"sidecar.istio.io/inject": False})


def node_selector_bool(draw: Draw, spec: Spec) -> str:
    path, pod = _pod(draw, spec)
    return _set(path, pod, "nodeSelector", {"gpu": True})


def checkpoint_mount(draw: Draw, spec: Spec) -> str:
    path, pod = _pod(draw, spec)
    pod.setdefault("volumes", []).append({"name": "ckpt", "emptyDir": {}})
    mount = {"name": "ckpt", "mountPath": "/checkpoints"}
    pod["containers"][0].setdefault("volumeMounts", []).append(mount)
    return f"{path}: emptyDir volume ckpt mounted at /checkpoints"


def mount_without_volume(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    mount = {"name": "training-data", "mountPath": "/data"}
    c.setdefault("volumeMounts", []).append(mount)
    return f"{path}.volumeMounts: + {_compact(mount)} (no such volume)"


def no_image(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    c.pop("image", None)
    return f"{path}.image: deleted"


def unknown_service_account(draw: Draw, spec: Spec) -> str:
    path, pod = _pod(draw, spec)
    return _set(path, pod, "serviceAccountName", "tf-runner")


def image_pull_policy_typo(draw: Draw, spec: Spec) -> str:
    path, c = _container(draw, spec)
    return _set(path, c, "imagePullPolicy", draw(st.sampled_from(["always", "IfNotPresnt"])))


def chief_zero_beside_ps(draw: Draw, spec: Spec) -> str:
    replicas = spec["tfReplicaSpecs"]
    template = copy.deepcopy(next(iter(replicas.values()))["template"])
    replicas.setdefault("PS", {"replicas": 1, "template": template})
    chief = "Master" if "Master" in replicas else "Chief"
    replicas.setdefault(chief, {"template": template})["replicas"] = 0
    return f"{chief}.replicas: 0 beside PS; types {sorted(replicas)}"


def all_workers_without_workers(draw: Draw, spec: Spec) -> str:
    spec["successPolicy"] = "AllWorkers"
    replicas = spec["tfReplicaSpecs"]
    worker = replicas.pop("Worker", None) or next(iter(replicas.values()))
    if not any(t in replicas for t in ("Chief", "Master")):
        replicas["Chief"] = {"replicas": 1, "template": worker["template"]}
    return f"successPolicy: AllWorkers, types {sorted(replicas)}"


def random_replicas(draw: Draw, spec: Spec) -> str:
    for rs in spec["tfReplicaSpecs"].values():
        rs["replicas"] = draw(st.integers(0, MAX_REPLICAS))
    return "replicas " + _compact({t: rs["replicas"] for t, rs in spec["tfReplicaSpecs"].items()})


def unknown_replica_type(draw: Draw, spec: Spec) -> str:
    kind = draw(st.sampled_from(["worker", "Launcher", "Trainer", "ps"]))
    template = copy.deepcopy(next(iter(spec["tfReplicaSpecs"].values()))["template"])
    spec["tfReplicaSpecs"][kind] = {"replicas": 1, "template": template}
    return f"tfReplicaSpecs.{kind} added"


def long_job_name(draw: Draw, spec: Spec) -> str:
    """Marker only: `Case.body` gives such a job a long name."""
    return "metadata.name: 50 characters"


# These rebuild the structure others reach into, so they go last.
def duplicate_containers(draw: Draw, spec: Spec) -> str:
    path, pod = _pod(draw, spec)
    pod["containers"].append(copy.deepcopy(pod["containers"][0]))
    return f"{path}.containers: two named {pod['containers'][0].get('name')!r}"


def containers_as_map(draw: Draw, spec: Spec) -> str:
    path, pod = _pod(draw, spec)
    pod["containers"] = {c.get("name") or "tensorflow": c for c in pod["containers"]}
    return f"{path}.containers: a map by name"


def field_name_typo(draw: Draw, spec: Spec) -> str:
    rt, rs = _replica(draw, spec)
    typo = draw(st.sampled_from(["contianers", "replica", "restartpolicy", "tfReplicaSpec"]))
    if typo == "contianers":
        rs["template"]["spec"]["contianers"] = rs["template"]["spec"].pop("containers")
        return f"{rt}.template.spec.contianers"
    if typo == "replica":
        rs["replica"] = rs.pop("replicas", 1)
        return f"{rt}.replica"
    if typo == "restartpolicy":
        rs["restartpolicy"] = rs.pop("restartPolicy", "Never")
        return f"{rt}.restartpolicy"
    spec["tfReplicaSpec"] = spec.pop("tfReplicaSpecs")
    return "spec.tfReplicaSpec"


def delete_required(draw: Draw, spec: Spec) -> str:
    rt, rs = _replica(draw, spec)
    what = draw(st.sampled_from(["template", "template.spec", "containers", "container name"]))
    if what == "template":
        del rs["template"]
    elif what == "template.spec":
        del rs["template"]["spec"]
    elif what == "containers":
        del rs["template"]["spec"]["containers"]
    else:
        rs["template"]["spec"]["containers"][0].pop("name", None)
    return f"{rt}: {what} deleted"


MUTATIONS: dict[str, Callable[[Draw, Spec], str]] = {
    f.__name__.replace("_", "-"): f
    for f in [
        random_replicas,
        numeric_quantities,
        fractional_gpu,
        gpu_request_differs,
        env_as_map,
        ports_as_map,
        port_as_string,
        port_without_number,
        user_port_2222,
        duplicate_env,
        env_value_number,
        args_with_numbers,
        annotation_bool,
        node_selector_bool,
        checkpoint_mount,
        mount_without_volume,
        no_image,
        unknown_service_account,
        image_pull_policy_typo,
        chief_zero_beside_ps,
        all_workers_without_workers,
        unknown_replica_type,
        long_job_name,
        duplicate_containers,
        containers_as_map,
        field_name_typo,
        delete_required,
    ]
}


# Mutations that leave no structure for another of these to reach into.
STRUCTURAL = {"containers-as-map", "field-name-typo", "delete-required"}


@st.composite
def mutated_specs(
    draw: Draw, first: str | None = None, base: int | None = None
) -> tuple[str, str, Spec]:
    """Base manifest number `base` (or a drawn one) with mutation `first` alone, or with one
    or two drawn ones: (mutations and base, what changed, spec)."""
    bases = base_manifests()
    name, spec = bases[base] if base is not None else draw(st.sampled_from(bases))
    spec = copy.deepcopy(spec)
    if first:
        names = [first]
    else:
        names = draw(
            st.lists(st.sampled_from(list(MUTATIONS)), min_size=1, max_size=2, unique=True).filter(
                lambda ns: len(STRUCTURAL.intersection(ns)) <= 1
            )
        )
    names.sort(key=list(MUTATIONS).index)
    changes = [MUTATIONS[n](draw, spec) for n in names]
    return f"{'+'.join(names)} ({name})", "; ".join(changes), spec


Example = tuple[str, str, Spec]  # (class, what it changed, spec)


def collect(strategy: st.SearchStrategy[Example], count: int, batch: int = 4) -> list[Example]:
    """`count` distinct examples of `strategy`, the same ones on every run: a few from each of
    several fixed seeds, since within one run hypothesis soon varies its earlier examples."""
    found: dict[str, Example] = {}
    for n in range(count * 4):
        if len(found) >= count:
            break

        @seed(n)
        @settings(
            max_examples=batch,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(strategy)
        def gather(example: Example) -> None:
            if len(found) < count:
                found.setdefault(json.dumps(example, sort_keys=True), copy.deepcopy(example))

        gather()
    return list(found.values())


# --- applying and judging ---


@dataclass
class Case:
    name: str
    kind: str  # "schema", or the mutations and the base manifest
    change: str  # what the mutations changed ("" for schema specs)
    spec: Spec
    refused: str | None = None  # kubectl's message when the API server refused it
    conditions: list[dict[str, Any]] = field(default_factory=list)
    tracebacks: int = 0

    def body(self, namespace: str) -> dict[str, Any]:
        name = self.name
        if "long-job-name" in self.kind.split(" (")[0].split("+"):
            name = (name + "-" + "x" * 48)[:50]
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TFJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": self.spec,
        }

    @property
    def verdict(self) -> str:
        if self.refused is not None:
            return "refused"
        if any(c.get("type") == "ManagedElsewhere" for c in self.conditions):
            return "elsewhere"  # runPolicy.managedBy names another controller: an Event says so
        if not self.conditions:
            return "silent"
        failed = [c for c in self.conditions if c.get("type") == "Failed"]
        if failed and failed[0].get("reason") == "InvalidSpec":
            return "InvalidSpec"
        return "ran"

    def short(self) -> str:
        return self.change or _compact(self.spec)[:300]


def cases(count: int) -> list[Case]:
    """Schema specs, then every mutation alone (the bases taken in turn), then drawn
    combinations on drawn bases."""
    from_crd = collect(schema_specs(), round(count * SCHEMA_SHARE))
    left = count - len(from_crd)
    each = max(1, left // (2 * len(MUTATIONS)))
    bases = len(base_manifests())
    mutated = [
        example
        for i, name in enumerate(MUTATIONS)
        for example in collect(mutated_specs(name, i % bases), each)
    ]
    mutated = mutated[:left] + collect(mutated_specs(), max(0, left - len(mutated)))
    return [Case(f"fz-{i:03d}", *example) for i, example in enumerate(from_crd + mutated)]


def _refusal(stderr: str) -> str:
    """kubectl's error, without the warnings it prints beside it."""
    lines = [ln for ln in stderr.splitlines() if not ln.startswith("Warning:")]
    return "\n".join(lines).strip()


_JOB_IN_LINE = re.compile(
    r"\('(?P<ns>[^']+)', '(?P<name>[^']+)'\)|\[(?P<ns2>[^/\]]+)/(?P<n2>[^\]]+)\]"
)


def traceback_jobs(log: str, namespace: str) -> tuple[int, Counter[str]]:
    """Traceback lines in `log`, and how many of them followed a line naming each job."""
    total, per_job, current = 0, Counter[str](), ""
    for line in log.splitlines():
        if "Traceback" in line:
            total += 1
            per_job[current] += 1
            continue
        m = _JOB_IN_LINE.search(line)
        if m and (m.group("ns") or m.group("ns2")) == namespace:
            current = m.group("name") or m.group("n2")
    return total, per_job


def events_of_deleted_jobs(
    core: Any, namespace: str, names: set[str]
) -> dict[str, list[dict[str, Any]]]:
    """For jobs deleted by their TTL before we saw them, or left to another controller: their
    Events, as conditions."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if not names:
        return found
    for e in core.list_namespaced_event(namespace).items:
        name = e.involved_object.name
        if e.involved_object.kind == "TFJob" and name in names:
            failed = e.reason in ("InvalidSpec", "TFJobFailed")
            kind = "Failed" if failed else e.reason.removeprefix("TFJob")
            found[name].append({"type": kind, "reason": e.reason, "message": e.message})
    return found


def report(cases: list[Case], tracebacks: int) -> str:
    """The summary line, then one line per spec class (mutations, or schema) that came out
    silent or with tracebacks: how many of how many, on which bases, and one example."""
    verdicts = Counter(c.verdict for c in cases)
    lines = [
        f"fuzz: tried {len(cases)} | refused at apply {verdicts['refused']} | "
        f"InvalidSpec {verdicts['InvalidSpec']} | ran {verdicts['ran']} | "
        f"left to another controller {verdicts['elsewhere']} | "
        f"silent {verdicts['silent']} | traceback lines {tracebacks}"
    ]
    classes: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        classes[c.kind.split(" (")[0]].append(c)
    for title, bad in (
        ("silent", lambda c: c.verdict == "silent"),
        ("traceback", lambda c: c.tracebacks > 0),
    ):
        for kind, group in sorted(classes.items()):
            hits = [c for c in group if bad(c)]
            if hits:
                bases = sorted({c.kind.partition(" (")[2].rstrip(")") for c in hits} - {""})
                on = f" on {', '.join(bases)}" if bases else ""
                lines.append(
                    f"  {title}: {kind} {len(hits)}/{len(group)}{on}; e.g. {hits[0].name}: "
                    f"{hits[0].short()}"
                )
    return "\n".join(lines)


@pytest.fixture
def fuzz_jobs(kubectl: Any, ns: str) -> Iterator[None]:
    yield
    kubectl.run("delete", "tfj", "--all", "-n", ns, "--wait=false", check=False)


def test_every_accepted_spec_gets_a_condition_and_nothing_crashes(
    kubectl, custom, core, ns, operator, fuzz_jobs
):
    started = time.monotonic()
    specs = cases(EXAMPLES)
    assert len(specs) >= EXAMPLES * 0.9, f"hypothesis found only {len(specs)} distinct specs"
    offset, starts = operator.log.stat().st_size, operator.starts

    def apply(case: Case) -> None:
        body = json.dumps(case.body(ns))
        proc = kubectl.run("apply", "-f", "-", input=body, check=False)
        if proc.returncode != 0:
            case.refused = _refusal(proc.stderr)

    with ThreadPoolExecutor(APPLY_THREADS) as pool:
        list(pool.map(apply, specs))
    applied = time.monotonic()
    accepted = {c.body(ns)["metadata"]["name"]: c for c in specs if c.refused is None}

    def conditions() -> dict[str, list[dict[str, Any]]]:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
        return {
            j["metadata"]["name"]: (j.get("status") or {}).get("conditions") or [] for j in items
        }

    seen: dict[str, list[dict[str, Any]]] = {}
    # Jobs whose runPolicy.managedBy names another controller get no status from us: an Event.
    elsewhere = {n for n, c in accepted.items() if handover.managed_elsewhere(c.spec)}

    def all_have_conditions() -> bool:
        # A job that is gone was deleted by its ttlSecondsAfterFinished: it had finished.
        now = conditions()
        seen.update(now)
        return all(seen.get(n) or n not in now for n in accepted if n not in elsewhere)

    def all_said() -> bool:
        return set(events_of_deleted_jobs(core, ns, elsewhere)) >= elsewhere

    with contextlib.suppress(AssertionError):  # the silent ones are counted and reported below
        wait_for(all_have_conditions, CONDITION_WAIT, "a condition on every accepted TFJob", 0.5)
        wait_for(all_said, CONDITION_WAIT, "an Event on every job left to another controller")
    gone = events_of_deleted_jobs(core, ns, (set(accepted) - set(conditions())) | elsewhere)
    for name, case in accepted.items():
        case.conditions = seen.get(name) or gone.get(name) or []

    with open(operator.log, "rb") as f:
        f.seek(offset)
        log = f.read().decode(errors="replace")
    tracebacks, per_name = traceback_jobs(log, ns)
    for name, count in per_name.items():
        # A name in a log line is a job's, or one of its children's (`<job>-<type>[-<i>]`).
        owners = [j for j in accepted if name == j or name.startswith(j + "-")]
        if owners:
            accepted[max(owners, key=len)].tracebacks += count
    summary = report(specs, tracebacks)
    now = time.monotonic()
    print(
        f"\n{summary}\n(generate and apply {applied - started:.0f} s, wait {now - applied:.0f} s)"
    )
    if DUMP:
        with open(DUMP, "w") as out:
            for c in specs:
                fields = ("name", "kind", "change", "refused", "conditions", "tracebacks")
                row = {k: getattr(c, k) for k in fields}
                out.write(json.dumps({**row, "verdict": c.verdict, "spec": c.spec}) + "\n")

    problems = [f"{c.name} refused with no message" for c in specs if c.refused == ""]
    problems += [
        f"{c.name}: {cond.get('type')}/{cond.get('reason')}: {cond.get('message')}"
        for c in specs
        for cond in c.conditions
        if INTERNAL_ERROR in (cond.get("message") or "").lower()
    ]
    if any(c.verdict == "silent" for c in specs):
        problems.append("accepted TFJobs with no condition after the deadline (silent)")
    if tracebacks:
        problems.append(f"{tracebacks} Traceback lines in the operator log ({operator.log})")
    if operator.proc is None or operator.proc.poll() is not None or operator.starts != starts:
        problems.append("the operator exited or was restarted")
    if problems:
        pytest.fail("\n".join([summary, *problems]), pytrace=False)
