"""The operator process: kopf handlers, the reconciler that applies what the rules decide, its
work queue, the API client with its rate limit, leader election, metrics and configuration."""
