"""The bed's ground: where things are (`paths`), processes (`procs`), the Go programs it
builds (`gobuild`), kubectl and helm (`tools`), talking to an API server (`kube`) and the
TFJob and pod bodies the tests send (`jobs`)."""
