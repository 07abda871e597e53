"""kind on this machine: a node image assembled from the bed's own parts (`nodeimage`, from what
`parts` lists), and kind's clusters run on the bed's podman (`cluster`)."""
