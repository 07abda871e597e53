"""The `tfjob` command: a TFJob run as local processes, and submit/get/logs/delete/tensorboard
on a cluster. Uses the API and the rules, never the controller."""
