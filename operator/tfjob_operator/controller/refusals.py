"""What the API server's refusals mean: which only a spec change can heal, which a retry does,
and what each says."""

from __future__ import annotations

import json

import kubernetes

# Server errors that no retry can heal: the spec makes something Kubernetes will not take.
TERMINAL_STATUSES = {400, 413, 422}
TERMINAL_MESSAGES = ("failed to create typed patch object", "request is too large")
# A child of that name is controlled by another owner: an earlier TFJob of the same name, whose
# children the garbage collector has yet to delete (`lineage`). Retried, with its backoff.
EARLIER_OWNER = "Only one reference can have Controller set to true"


def is_terminal(e: kubernetes.client.ApiException) -> bool:
    """A refusal that only a spec change can heal (a 4xx, a typed-patch 500, too large), but
    for a child of an earlier TFJob of the same name, which the garbage collector deletes."""
    message = api_message(e)
    if EARLIER_OWNER in message:
        return False
    return e.status in TERMINAL_STATUSES or any(m in message for m in TERMINAL_MESSAGES)


def namespace_going(e: kubernetes.client.ApiException) -> bool:
    """Whether the job's namespace is being deleted: nothing in it is ours to do any more."""
    return e.status == 403 and "being terminated" in api_message(e)


def api_message(e: kubernetes.client.ApiException) -> str:
    """What the API server says of the refusal: its Status message, else the reason."""
    try:
        return json.loads(e.body or "{}").get("message") or str(e.reason)
    except (ValueError, AttributeError):
        return str(e.body or e.reason)
