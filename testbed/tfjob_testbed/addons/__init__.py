"""What the bed adds to a cluster: Kueue (`kueue`), Katib (`katib`), Kubeflow's
training-operator as a peer (`peer`) and the Kubeflow SDK in a virtualenv of its own
(`kubeflow_sdk`). None imports the cluster or the nodes: Kueue and Katib take the cluster they
are installed on as a Protocol (`target`); `leftovers` deletes what their managers own, and lets
go of what outlives them."""
