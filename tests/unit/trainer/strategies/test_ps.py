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


@pytest.fixture
def tf_logger():
    """TensorFlow's logger as the trainer's main leaves it (errors only), restored after."""
    tf_log = logging.getLogger("tensorflow")
    level, filters, propagate = tf_log.level, list(tf_log.filters), tf_log.propagate
    tf_log.setLevel(logging.ERROR)
    tf_log.propagate = True
    yield tf_log
    tf_log.setLevel(level)
    tf_log.filters[:] = filters
    tf_log.propagate = propagate


def test_the_chief_log_shows_a_lost_worker_back_and_no_other_tensorflow_chatter(tf_logger, caplog):
    from tensorflow.python.platform import tf_logging

    ps.show_recoveries()
    ps.show_recoveries()  # a second chief run in one process adds no second filter
    worker = "/job:worker/replica:0/task:1"
    with caplog.at_level(logging.INFO):
        tf_logging.info("Cluster now being recovered.")
        tf_logging.warning("a warning the trainer does not show")
        tf_logging.info(ps.RECOVERED, worker)
        tf_logging.error("Worker %s failed with %r", worker, "x")
    shown = [r.getMessage() for r in caplog.records if r.name == "tensorflow"]
    assert shown == [f"Worker {worker} has been recovered.", f"Worker {worker} failed with 'x'"]
    assert len(tf_logger.filters) == 1


def test_the_recovery_line_is_the_one_tensorflow_logs():
    import inspect

    from tensorflow.python.distribute.coordinator import cluster_coordinator

    assert f'logging.info("{ps.RECOVERED}", worker_device_name)' in inspect.getsource(
        cluster_coordinator
    )
