"""A user project for the tfjob trainer: a regression on synthetic tabular data.

The trainer imports it by name (`--model=tabular_example.models:regression`,
`--input=tabular_example.data:train`); nothing here imports the trainer except `data`, for the
sharding helpers of `tfjob_trainer.datadir`.
"""
