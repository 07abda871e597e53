"""The TFJob API: its schema (the single source of the CRD), typed spec with defaults and
validation, pod templates read against Kubernetes' own schema, and the RBAC the operator needs.
Imports neither kopf nor the Kubernetes client."""
