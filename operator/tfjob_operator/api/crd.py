"""The TFJob CustomResourceDefinition, generated from the API models in `spec.py`.

`python -m tfjob_operator.api.crd` prints it; `manifests/crd.yaml`, `manifests/kubeflow/crd.yaml`
(group kubeflow.org) and the chart's `files/` copies are that output, written by
`make generate`, and a test fails when they differ.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml
from pydantic import BaseModel

from tfjob_operator.api.spec import (
    GROUP,
    KIND,
    MANAGED_BY_IMMUTABLE,
    MANAGED_BY_RULE,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    TFJobSpec,
    TFJobStatus,
)

HEADER = "# Generated from tfjob_operator/api/spec.py by `make generate`. Do not edit.\n"

PRINTER_COLUMNS = [
    {
        "name": "State",
        "type": "string",
        "jsonPath": ".status.conditions[-1:].type",
        "description": "The newest condition.",
    },
    {
        "name": "Active",
        "type": "string",
        "jsonPath": ".status.activeReplicas",
        "description": "Running pods over expected pods.",
    },
    {
        "name": "Restarts",
        "type": "integer",
        "jsonPath": ".status.restarts",
        "description": "Failure restarts over all replicas.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "ExitCode",
        "type": "integer",
        "jsonPath": ".status.failure.exitCode",
        "priority": 1,
        "description": "Exit code of the container that failed the job.",
    },
]

# JSON-schema keywords a structural CRD schema does not take, or that we state in descriptions.
_DROPPED = {"title", "default", "$defs"}


def structural(model: type[BaseModel], description: str) -> dict[str, Any]:
    """A pydantic model's JSON schema, made structural: refs inlined, nullables unwrapped."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            return convert({**target, **{k: v for k, v in node.items() if k != "$ref"}})
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            if len(options) == 1:
                rest = {k: v for k, v in node.items() if k != "anyOf"}
                return convert({**options[0], **rest})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED:
                continue
            if key == "additionalProperties" and not isinstance(value, dict):
                continue  # properties and additionalProperties may not be mixed; pruning rules
            out[key] = (
                convert(value) if key != "properties" else {k: convert(v) for k, v in value.items()}
            )
        if out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("type", "object")
        return out

    result: dict[str, Any] = convert({k: v for k, v in schema.items() if k != "$defs"})
    result["description"] = description
    return result


def spec_schema() -> dict[str, Any]:
    """The spec's schema. `runPolicy` defaults to {} as Kubeflow's own controller writes it:
    Kubeflow's SDK cannot read a TFJob without one (the API server fills it in on create and
    on every read of an object stored without it)."""
    schema = structural(TFJobSpec, "The desired state of the TFJob.")
    schema["properties"]["runPolicy"]["default"] = {}
    return schema


def crd(group: str = GROUP) -> dict[str, Any]:
    """The CustomResourceDefinition object, in `group` (tfjob.dev, or kubeflow.org where the
    operator serves Kubeflow's TFJobs: the same schema)."""
    root = {
        "type": "object",
        "description": "A distributed TensorFlow training job.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": structural(TFJobStatus, "The observed state, written by the operator."),
        },
        # At the root: whether spec.managedBy may still be set depends on the status.
        "x-kubernetes-validations": [{"rule": MANAGED_BY_RULE, "message": MANAGED_BY_IMMUTABLE}],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                # Kubeflow's CRD has none: `tfj` stays ours where both groups are installed.
                **({"shortNames": SHORT_NAMES} if group == GROUP else {}),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def render(group: str = GROUP) -> str:
    return HEADER + yaml.safe_dump(crd(group), sort_keys=False, width=100)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
