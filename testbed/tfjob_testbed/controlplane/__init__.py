"""The control plane: etcd, kube-apiserver and kube-controller-manager on this host (`plane`),
each started from a command line that a pure function of `argv` builds."""
