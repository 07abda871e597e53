"""The real nodes: what both are made of (`realnode`) and configured with (`nodeconfig`), node 1
(`node`) and the one that joins it (`second_node`), this host as they see and change it (`host`,
`host-packages.sh`) and what they need of it (`capacity`), and the cluster's DNS records and
volumes (`nodeservices`, a process of its own: `dns` and `volumes` decide, `reflector` watches
the API server for it, all over the objects of `kubeobjects`)."""
