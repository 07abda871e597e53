"""What the trainer and the operator's `tfjob` command agree on, owned by neither: the trainer
prints its result line, the local runner and `tfjob submit --follow` read it back."""
