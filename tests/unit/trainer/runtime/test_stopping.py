"""The task's SIGTERM handler runs again inside itself when two SIGTERMs come close together
(the process group's and the one the supervisor passes on): it must return wherever the first
one is, and the stop it records is the first one's."""

from __future__ import annotations

import signal

from tfjob_testbed.core.signals import handled_again_everywhere
from tfjob_trainer.runtime.stopping import StopRequest


def test_a_sigterm_inside_the_handler_of_a_saving_task_returns_and_keeps_the_first_stop():
    stop = StopRequest()
    stop.saving = True  # a loop that saves: the handler only records the request
    assert not stop.requested
    places = handled_again_everywhere(stop._handler, signal.SIGTERM)
    assert places > 1
    assert stop.requested and stop.at is not None
    first = stop.at
    stop._handler(signal.SIGTERM, None)
    assert stop.at == first  # a later SIGTERM changes nothing: the grace period runs from the first
