"""The local-cluster e2e uses the integration test bed: control plane, CRD and operator."""

from tests.integration.conftest import *  # noqa: F403
