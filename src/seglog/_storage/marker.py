"""The log directory's marker, ``seglog.json``: proof that seglog created the
directory, the format version, and the log's stored settings.

Written when a writer creates the log and whenever a writer opens it with options
that change a setting (temp file, fsync, rename, fsync directory). seglog refuses
to open a directory that holds files but no marker.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, fields
# Any: parsed JSON / JSON documents (dict[str, Any]): seglog.json
from typing import Any

from .._codec import format as _format
from .._runtime.files import (CHECKPOINT_MAGIC, GROUPS_DIR, LOCK_FILES, LOG_START, MARKER,
                              RECOVERY_POINT, SPARK_DIR, TOPICS_DIR, WRITER_SESSION, atomic_write,
                              is_leftover, list_dir, list_segments, require_dir, segment_path)
from ..config import LogConfig
from ..errors import CorruptRecordError, InvalidConfigError, NotALogError

# the log's format is its batches' (docs/FORMAT.md)
FORMAT = _format.MAGIC
# files whose content proves a directory was written by seglog before it had a marker
_LEGACY_PROOF = (RECOVERY_POINT, LOG_START, WRITER_SESSION)


def read(directory: str) -> dict[str, Any] | None:
    """The marker's contents, None if there is none; ``NotALogError`` if damaged."""
    path = os.path.join(directory, MARKER)
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise NotALogError(f"{path} is unreadable ({e}); nothing was changed. Restore "
                           f"it or move the log's files to a new directory") from None
    if (not isinstance(data, dict) or data.get("seglog") != "log"
            or not isinstance(data.get("format"), int) or not isinstance(data.get("config"), dict)):
        raise NotALogError(f"{path} is not a seglog marker; nothing was changed")
    if data["format"] > FORMAT:
        raise NotALogError(f"{path}: log format {data['format']} is newer than this seglog "
                           f"supports ({FORMAT}); upgrade seglog")
    if data["format"] < FORMAT:
        raise _old_format(data["format"], path)
    return data


def _old_format(version: int, path: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"the log is of format {version}: this seglog reads format {FORMAT} only (XXH3 "
        f"batch checksums) and converts no older data; nothing was changed", path)


def write(directory: str, config: LogConfig, created: dict[str, Any] | None = None) -> None:
    data = {"seglog": "log", "format": FORMAT,
            "id": (created or {}).get("id") or uuid.uuid4().hex,
            "created_ms": (created or {}).get("created_ms") or time.time_ns() // 1_000_000,
            "config": asdict(config)}
    atomic_write(os.path.join(directory, MARKER), json.dumps(data, indent=1).encode())


def stored_config(marker: dict[str, Any], overrides: dict[str, Any], strict: bool) -> LogConfig:
    """The stored settings with ``overrides`` applied. ``strict`` (a writer): a stored
    setting this version does not know is an error (it may change how the log must
    be kept); a reader ignores it."""
    known = {f.name for f in fields(LogConfig)}
    stored = {k: v for k, v in marker["config"].items() if k in known}
    unknown = sorted(set(marker["config"]) - known)
    if unknown and strict:
        raise InvalidConfigError(
            f"the log's stored settings include {', '.join(unknown)}, unknown to this seglog "
            f"version; upgrade seglog (nothing was changed)")
    try:
        return LogConfig.from_kwargs({**stored, **overrides})
    except InvalidConfigError as e:
        raise InvalidConfigError(f"{e} (stored settings merged with the options given)") from None


def ownership(directory: str, names: list[str]) -> str:
    """"marked", "empty" (seglog may create a log here) or "legacy" (written by seglog
    before markers existed); ``NotALogError`` for anything else."""
    if MARKER in names:
        return "marked"
    others = [n for n in names if n not in LOCK_FILES and not is_leftover(n)]
    if not others:
        return "empty"
    for name in _LEGACY_PROOF:
        if name in others and _proves_seglog(os.path.join(directory, name)):
            _refuse_old_batches(directory, others)
            return "legacy"
    shown = ", ".join(sorted(others)[:5]) + (" ..." if len(others) > 5 else "")
    raise NotALogError(
        f"{directory} holds files ({shown}) but no {MARKER}: it was not created by "
        f"seglog, and seglog never changes files it cannot prove are its own. "
        f"Use an empty or new directory")


def check_root(root: str, what: str = "topic root") -> bool:
    """Check, before anything is made or read there, that ``root`` (absolute) may hold
    topics and consumer groups: True if it is a directory that is seglog's (it holds
    ``__topics/``, ``__groups/`` or the Spark sink's ``__spark/``, or nothing but logs)
    or empty, False if nothing is at ``root`` (the caller makes it). ``NotALogError`` for a file, a link to
    nothing, or a directory holding anything else: nothing there is changed."""
    if not require_dir(root, what, create=True):
        return False
    names = list_dir(root)
    if any(n in names and os.path.isdir(os.path.join(root, n))
           for n in (TOPICS_DIR, GROUPS_DIR, SPARK_DIR)):
        return True
    others = [n for n in names if not os.path.isfile(os.path.join(root, n, MARKER))]
    if others:
        shown = ", ".join(sorted(others)[:5]) + (" ..." if len(others) > 5 else "")
        raise NotALogError(
            f"{root} holds files ({shown}) but no {TOPICS_DIR} or {GROUPS_DIR}: it is not a "
            f"{what} seglog made, and seglog never writes beside files it cannot prove "
            f"are its own; nothing was changed. Use an empty or new directory")
    return True


def _refuse_old_batches(directory: str, names: list[str]) -> None:
    """A log from before markers has no stored format: its first batch says it. Its
    writer's open must not take batches of an older format for a torn tail."""
    bases = list_segments(directory, names)
    if not bases:
        return
    path = segment_path(directory, bases[0])
    try:
        with open(path, "rb") as f:
            head = f.read(_format.LENGTH_END + 1)
    except OSError:
        return      # the open that follows reports it
    if len(head) > _format.LENGTH_END and head[_format.LENGTH_END] == _format.OLD_MAGIC:
        raise _old_format(_format.OLD_MAGIC, path)


def _proves_seglog(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if head.startswith(CHECKPOINT_MAGIC.encode() + b"\n"):
        return True
    try:
        data = json.loads(head)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("version") == 1 and "boot_id" in data


__all__ = ["read", "write", "stored_config", "ownership", "check_root"]
