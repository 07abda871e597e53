"""The project's own programs as the bed runs them: the operator as a process (`operator`), the
`tfjob` command (`cli`) and a TFJob's tasks as local trainer processes (`launcher`)."""
