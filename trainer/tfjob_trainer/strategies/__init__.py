"""How a task trains: one runner per strategy, the evaluator's, and the registry naming them."""
