"""The chief's stall watchdog: it leaves only when closures stopped finishing although every
peer answers again, never while a peer is still away or while closures finish slowly."""

from __future__ import annotations

from tfjob_trainer.runtime.stall import Watchdog


class Closure:
    def __init__(self):
        self.done = False


class Bed:
    def __init__(self, seconds=30.0):
        self.now = 0.0
        self.up = {"ps:1": True, "worker:1": True}
        self.dog = Watchdog(
            self.up,
            seconds,
            on_stall=lambda m: None,
            clock=lambda: self.now,
            reachable=lambda a: self.up[a],
            done=lambda c: c.done,
        )

    def at(self, t):
        self.now = t
        return self.dog.check()


def test_closures_that_finish_are_progress():
    bed = Bed()
    for t in range(0, 300, 10):
        c = Closure()
        bed.dog.scheduled(c)
        assert bed.at(t) is None
        c.done = True
    assert bed.at(301) is None


def test_a_stale_connection_after_the_peer_came_back_is_left():
    bed = Bed()
    bed.dog.scheduled(Closure())  # never answers: its worker's node died
    bed.up["worker:1"] = False
    assert bed.at(40) is None and bed.at(200) is None, "the peer is away: wait for it"
    bed.up["worker:1"] = True  # its replacement answers at the same name
    assert bed.at(210) is None, "counted from when every peer answers"
    message = bed.at(240)
    assert message and "every peer accepts connections" in message


def test_a_stall_with_every_peer_up_is_left_after_twice_the_limit_at_most():
    bed = Bed()
    bed.dog.scheduled(Closure())
    assert bed.at(29) is None and bed.at(30) is None
    assert bed.at(59) is None
    assert bed.at(60)


def test_slow_closures_raise_the_limit():
    bed = Bed()
    first = Closure()
    bed.dog.scheduled(first)
    first.done = True
    assert bed.at(100) is None  # one closure took 100 s
    bed.dog.scheduled(Closure())
    assert bed.dog.limit() == 500
    assert bed.at(400) is None and bed.at(900) is None and bed.at(1399) is None
    assert bed.at(1400)


def test_nothing_scheduled_is_no_stall():
    bed = Bed()
    assert bed.at(1000) is None


def test_a_tensorflow_that_does_not_say_turns_it_off():
    bed = Bed()
    bed.dog.done = lambda c: None
    bed.dog.scheduled(Closure())
    assert bed.at(100) is None and bed.dog.blind
