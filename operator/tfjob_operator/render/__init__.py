"""Manifests generated from the API package: the CRD and RBAC under `manifests/` and the
chart's copies, and the operator's PodDisruptionBudget in `manifests/operator.yaml`
(`make generate`)."""
