"""What the bed adds to a cluster: Kueue (`kueue`), Kubeflow's training-operator as a peer
(`peer`) and the Kubeflow SDK in a virtualenv of its own (`kubeflow_sdk`). None imports the
cluster or the nodes: Kueue takes the cluster it is installed on as a Protocol."""
