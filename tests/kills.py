"""A writer killed at a chosen step of a maintenance pass, for the tests of readers,
verify and the next open that must make sense of what it left."""

from __future__ import annotations

import os

import pytest

from seglog import Log, cleaner
from seglog.testing import abandon


def kill_inside_compaction_swap(log: Log, monkeypatch: pytest.MonkeyPatch) -> str:
    """Compact ``log`` and "kill" its writer right after the swap's commit point (the
    manifest written, no file renamed yet), leaving its files as a crash would;
    returns the stem of the group's first segment (its new files wait beside it as
    ``.seglog-cleaned.<stem>.*``)."""
    def killed(directory: str, base: int, end: int) -> None:
        raise KeyboardInterrupt("killed after the commit point")
    monkeypatch.setattr(cleaner, "swap_in", killed)
    with pytest.raises(KeyboardInterrupt):
        log.compact()
    monkeypatch.undo()
    abandon(log)
    (manifest,) = [n for n in os.listdir(log.path) if n.startswith(".seglog-swap.")]
    return manifest[len(".seglog-swap."):]
