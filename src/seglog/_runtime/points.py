"""Race windows named where they open, so that a test can make another thread act
inside one (``seglog.testing.at``) without knowing the code around it.

SQLite marks its fault and race sites in the code (``sqlite3FaultSim``,
``testcase()``) for the same reason: the window is stated where it is, a reader of
the code sees which windows are tested, and a change that moves the window moves
its name with it (a test of a window that no longer opens fails, "the race was not
forced", instead of passing by patching a function nobody calls). Each point is
off unless a test arms it: ``reach`` is then one dict lookup, and no point sits on a
per-message path.
"""

from __future__ import annotations

from typing import Callable

# name -> the window it opens (``seglog.testing.at`` accepts these names only)
POINTS = {
    "append.pack": "append() packs a one-record batch's header fields for the millisecond "
                   "cache it took; it stores them there next",
    "read.lookup": "read() or iter() checked the offset against the log start; it looks up "
                   "the offset's segment in the list next",
    "reader.refresh": "a readonly log's refresh found the log open; it takes the lock it "
                      "re-lists the directory under next",
    "writers.flushed": "one of several writers found its log open; it reads the flushed "
                       "offset from the mapped shared header next",
}

_armed: dict[str, Callable[[], None]] = {}


def reach(name: str) -> None:
    """The code is at point ``name``: run what a test armed there, if anything."""
    fn = _armed.get(name)
    if fn is not None:
        fn()


def arm(name: str, fn: Callable[[], None]) -> None:
    """Run ``fn`` (in the thread that reaches it) at every reach of ``name``."""
    if name not in POINTS:
        raise ValueError(f"no race point {name!r}; the points are {sorted(POINTS)}")
    _armed[name] = fn


def disarm(name: str) -> None:
    _armed.pop(name, None)
