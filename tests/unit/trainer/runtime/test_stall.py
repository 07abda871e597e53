"""The chief's stall watchdog: it leaves only when closures stopped finishing although every
peer answers again, never while a peer is still away or while closures finish slowly. Its
supervisor's side does the same for a chief whose threads stopped running (its pulse)."""

from __future__ import annotations

import json
import os

from tfjob_trainer.runtime.stall import Frozen, Pulse, Watchdog


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


class Supervisor:
    """The supervisor's side: beats read from the task's pipe, on a clock of the test's."""

    def __init__(self):
        self.now = 0.0
        self.up = {"ps:1": True, "worker:1": True}
        self.judge = Frozen(clock=lambda: self.now, reachable=lambda a: self.up[a])

    def beat(self, t, limit=20.0, first=False):
        self.now = t
        message = {"limit": limit, **({"peers": sorted(self.up)} if first else {})}
        self.judge.feed(json.dumps(message).encode() + b"\n")

    def at(self, t):
        self.now = t
        return self.judge.check()


def test_a_task_without_a_pulse_is_never_frozen():
    assert Supervisor().at(10_000) is None


def test_a_pulse_that_goes_on_is_no_freeze():
    s = Supervisor()
    s.beat(0, first=True)
    for t in range(2, 400, 2):
        s.beat(t)
        assert s.at(t + 1) is None


def test_a_pulse_stopped_while_every_peer_answers_is_a_freeze():
    s = Supervisor()
    s.beat(0, first=True)
    s.beat(2)
    assert s.at(21) is None
    assert s.at(22) is None, "every peer answers from now on"
    assert s.at(41) is None
    message = s.at(42)
    assert message and "no thread has run for 40s" in message
    assert "waits on a connection to a peer that was replaced" in message


def test_a_frozen_task_is_left_alone_while_a_peer_is_away():
    s = Supervisor()
    s.beat(0, first=True)
    s.up["worker:1"] = False  # its node died; the replacement comes
    assert s.at(30) is None and s.at(300) is None
    s.up["worker:1"] = True
    assert s.at(310) is None, "counted from when every peer answers"
    assert s.at(329) is None and s.at(330)


def test_the_limit_is_never_below_a_few_beats():
    s = Supervisor()
    s.beat(0, limit=1.0, first=True)
    assert s.at(5) is None and s.at(6) is None and s.at(11) is None
    assert s.at(12)


def test_a_beat_split_across_reads_counts_once_whole():
    s = Supervisor()
    s.beat(0, first=True)
    s.now = 100
    s.judge.feed(b'{"limit": 2')
    assert s.judge.last_beat == 0
    s.judge.feed(b"0}\n")
    assert s.judge.last_beat == 100 and s.at(110) is None


def test_the_watchdog_beats_its_limit_and_its_peers_once():
    written = []
    pulse = Pulse()
    r, w = os.pipe()
    pulse.report_to(w)
    pulse.beat(60.0, ["ps:1", "worker:1"])
    pulse.beat(60.0, ["ps:1", "worker:1"])
    os.close(w)
    while chunk := os.read(r, 4096):
        written.append(chunk)
    os.close(r)
    lines = [json.loads(line) for line in b"".join(written).splitlines()]
    assert lines == [{"limit": 60.0, "peers": ["ps:1", "worker:1"]}, {"limit": 60.0}]
