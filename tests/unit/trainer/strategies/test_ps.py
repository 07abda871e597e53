"""The coordinator's progress fetch: a lost worker costs one report, a lost parameter server
fails the chief."""

from __future__ import annotations

import logging

import pytest
import tensorflow as tf

from tfjob_trainer.strategies import ps

WORKER_RESET = (
    "2 root error(s) found.\n  (0) UNAVAILABLE: recvmsg:Connection reset by peer\n"
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 "
    "while calling /tensorflow.WorkerService/RecvTensor:"
)
PS_RESET = (
    "UNAVAILABLE: failed to connect to all addresses\n"
    "Additional GRPC error information from remote target /job:ps/replica:0/task:0:"
)


class Remote:
    """What `ClusterCoordinator.schedule` returns, as far as the chief's loop reads it."""

    def __init__(self, outcome: object) -> None:
        self.outcome = outcome

    def fetch(self) -> object:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def test_a_fetched_report_is_the_loss_and_each_metric_as_floats():
    fetched = (tf.constant(0.5), (tf.constant(0.75), tf.constant(2.0)))
    assert ps.fetch_report(Remote(fetched)) == (0.5, (0.75, 2.0))


@pytest.mark.parametrize(
    "error",
    [
        tf.errors.UnavailableError(None, None, WORKER_RESET),
        tf.errors.CancelledError(None, None, "The corresponding function is aborted."),
    ],
    ids=["worker-reset", "aborted"],
)
def test_a_worker_lost_before_the_fetch_costs_only_the_report(error, caplog):
    with caplog.at_level(logging.WARNING):
        assert ps.fetch_report(Remote(error)) is None
    assert "a worker was lost before its progress was fetched" in caplog.text


def test_a_lost_parameter_server_still_fails_the_chief():
    with pytest.raises(tf.errors.UnavailableError):
        ps.fetch_report(Remote(tf.errors.UnavailableError(None, None, PS_RESET)))


@pytest.mark.parametrize(
    ("message", "peer"),
    [(PS_RESET, "a parameter server"), (WORKER_RESET, "a peer")],
)
def test_only_a_parameter_server_address_counts_as_one(message, peer):
    assert ps.from_ps(tf.errors.UnavailableError(None, None, message)) == (
        peer == "a parameter server"
    )


CONTEXT_EXISTS = (
    "Additional GRPC error information from remote target /job:ps/replica:0/task:0 while "
    "calling /tensorflow.eager.EagerService/CreateContext:\n"
    ':UNKNOWN:Error received from peer  {grpc_status:3, grpc_message:"EagerService:'
    'CreateContext failed. Context id: <12900366285956950715> already exists."}'
)


def test_a_context_that_already_exists_fails_the_task_as_a_lost_peer_does(monkeypatch):
    def strategy(_resolver):
        raise tf.errors.InvalidArgumentError(None, None, CONTEXT_EXISTS)

    monkeypatch.setattr(tf.distribute, "ParameterServerStrategy", strategy)
    with pytest.raises(ps.TaskFailed, match=r"connecting to the cluster failed .*already exists"):
        ps.connect(object())


def test_other_invalid_arguments_stay_the_programs(monkeypatch):
    def strategy(_resolver):
        raise tf.errors.InvalidArgumentError(None, None, "Invalid cluster spec: no chief")

    monkeypatch.setattr(tf.distribute, "ParameterServerStrategy", strategy)
    with pytest.raises(tf.errors.InvalidArgumentError):
        ps.connect(object())
