"""The chief's --metrics-file: one `name=value` line per report, appended, in the text Katib's
collectors parse with their default filter."""

from __future__ import annotations

import re

import pytest

from tfjob_trainer import options
from tfjob_trainer.output.progress_log import Progress, metrics_line

# Katib's default metric filter (pkg/metricscollector/v1beta1/common.DefaultFilter).
KATIB_FILTER = re.compile(r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)")


@pytest.mark.parametrize(
    ("step", "loss", "metrics", "want"),
    [
        (20, 0.5, {}, {"step": "20", "loss": "0.5"}),
        (
            40,
            0.123456789,
            {"accuracy": 0.875},
            {"step": "40", "loss": "0.123456789", "accuracy": "0.875"},
        ),
        (60, 1.5e-05, {"mae": 2.0}, {"step": "60", "loss": "1.5e-05", "mae": "2.0"}),
    ],
)
def test_a_report_is_what_katibs_filter_reads(step, loss, metrics, want):
    line = metrics_line(step, loss, metrics)
    assert {m.group(1): m.group(2) for m in KATIB_FILTER.finditer(line)} == want


def test_reports_are_appended_to_the_file(tmp_path):
    path = tmp_path / "katib" / "metrics.log"
    path.parent.mkdir()
    path.write_text("an earlier run\n")
    progress = Progress(None, 32, 0, metrics_file=path)
    progress.report(20, 0.75, {})
    progress.report(40, 0.5, {"accuracy": 0.9})
    assert path.read_text().splitlines() == [
        "an earlier run",
        "step=20 loss=0.75",
        "step=40 loss=0.5 accuracy=0.9",
    ]


def test_the_flag_names_the_file(tmp_path):
    assert options.parse([]).metrics_file is None
    got = options.parse([f"--metrics-file={tmp_path}/m.log"]).metrics_file
    assert got == tmp_path / "m.log"


def test_the_files_directory_is_made(tmp_path):
    path = tmp_path / "not" / "yet" / "metrics.log"
    Progress(None, 32, 0, metrics_file=path).report(20, 0.75, {})
    assert path.read_text() == "step=20 loss=0.75\n"
