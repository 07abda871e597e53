"""The project's test bed: a real Kubernetes control plane and node on this machine, the images,
kubectl and helm, and the helpers tests and benchmarks drive them with (see testbed/README.md).

Installed editable into the project's virtualenv (`make venv`); it works from the checkout it
lives in (`tfjob_testbed.core.paths.ROOT`), and is no part of the `tfjob-operator` distribution.
"""
