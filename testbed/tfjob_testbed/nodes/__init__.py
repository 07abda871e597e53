"""The real nodes: what both are made of (`realnode`), node 1 (`node`) and the one that joins it
(`second_node`), this host as they see and change it (`host`, `host-packages.sh`), and the
cluster's DNS records and volumes (`nodeservices`, a process of its own)."""
