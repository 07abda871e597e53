"""Manifests generated from the API package: the CRD and RBAC under `manifests/` and the
chart's copies (`make generate`)."""
