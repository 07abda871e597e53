"""The operator's malloc settings: glibc (the images' Debian, this machine) takes them; any
other C library is left alone."""

from __future__ import annotations

import platform

import pytest

from tfjob_operator import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_arenas_are_limited_and_trim_runs_on_glibc():
    assert memory.limit_arenas()
    memory.trim()


def test_without_glibc_nothing_is_done(monkeypatch):
    monkeypatch.setattr(memory, "_LIBC", None)
    assert memory.limit_arenas() is False
    memory.trim()
