from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def logdir(tmp_path):
    return str(tmp_path / "log")


@pytest.fixture
def synthetic_clock(monkeypatch):
    """For tests that stamp records with a made-up clock (ms values near 0): the
    timestamp window (message_timestamp_before/after_max_ms) is off. The window has
    tests of its own (test_settings.py)."""
    import seglog.log
    monkeypatch.setattr(seglog.log.Log, "_check_window", lambda self, lo, hi, now: None)
