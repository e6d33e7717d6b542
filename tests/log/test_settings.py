"""A log keeps its settings; record timestamps are checked against a sane window."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time

import pytest

from seglog import InvalidConfigError, Log, LogConfig, Record


def _tree(path) -> dict[str, str]:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_reopen_without_options_keeps_settings(tmp_path):
    """Created compact with no time retention; reopened with Log.open(path): before,
    retention deleted 6 of 7 segments."""
    path = tmp_path / "l"
    old = int(time.time() * 1000) - 30 * 24 * 3600 * 1000       # a month ago
    with Log.open(path, cleanup_policy="compact", retention_ms=None, segment_bytes=1024,
                  retention_check_ms=None) as log:
        for i in range(200):
            log.append(b"v%d" % i, key=b"k%d" % i, timestamp=old + i)
        segs = len(log.segments)
    assert segs >= 5
    with Log.open(path, retention_check_ms=10) as log:
        assert log.config.cleanup_policy == "compact" and log.config.retention_ms is None
        assert log.enforce_retention() == []
        # the background pass ran: it applies retention first (a compact log's is
        # nothing), then compacts, which counts a run
        deadline = time.monotonic() + 10
        while log.metrics()["compaction_runs"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.metrics()["compaction_runs"] >= 1, "the background pass never ran"
        assert len(log.segments) == segs and log.start_offset == 0
        assert "cleanup_policy='compact'" in repr(log) and "retention_ms=None" in repr(log)


def test_options_at_open_override_and_are_saved(tmp_path):
    path = tmp_path / "l"
    with Log.open(path, segment_bytes=4096):
        pass
    with Log.open(path, retention_bytes=10_000) as log:
        assert (log.config.segment_bytes, log.config.retention_bytes) == (4096, 10_000)
    with Log.open(path) as log:
        assert (log.config.segment_bytes, log.config.retention_bytes) == (4096, 10_000)
    with open(path / "seglog.json") as f:
        assert json.load(f)["config"]["retention_bytes"] == 10_000


def test_reader_uses_stored_settings_and_writes_nothing(tmp_path):
    path = tmp_path / "l"
    with Log.open(path, max_index_bytes=4096, cleanup_policy="compact") as log:
        log.append(b"x", key=b"k")
    before = _tree(path)
    r = Log.open(path, readonly=True, flush_ms=None)
    assert r.config.max_index_bytes == 4096 and r.config.cleanup_policy == "compact"
    assert r.config.flush_ms is None           # for this reader only
    r.close()
    assert _tree(path) == before
    with Log.open(path) as log:
        assert log.config.flush_ms == 1000


def test_stored_setting_unknown_to_this_version(tmp_path):
    path = tmp_path / "l"
    with Log.open(path):
        pass
    with open(path / "seglog.json") as f:
        m = json.load(f)
    m["config"]["tiered_storage"] = True       # written by a newer seglog
    with open(path / "seglog.json", "w") as f:
        json.dump(m, f)
    before = _tree(path)
    with pytest.raises(InvalidConfigError, match="tiered_storage"):
        Log.open(path)
    assert _tree(path) == before
    with Log.open(path, readonly=True) as r:   # a reader ignores it
        assert r.end_offset == 0


def test_bad_option_against_stored_settings_changes_nothing(tmp_path):
    path = tmp_path / "l"
    with Log.open(path):
        pass
    before = _tree(path)
    with pytest.raises(InvalidConfigError):
        Log.open(path, cleanup_policy="sometimes")
    assert _tree(path) == before


NOW = lambda: time.time_ns() // 1_000_000  # noqa: E731


@pytest.mark.parametrize("how", ["append", "batch", "batch-mixed", "record-list"])
def test_seconds_instead_of_milliseconds_are_rejected(tmp_path, how):
    path = tmp_path / "l"
    # small files: the test hashes them (a default segment is a 1 GiB sparse file)
    with Log.open(path, segment_bytes=65536, max_message_bytes=4096) as log:
        log.append(b"ok")
        secs = int(time.time())
        before = _tree(path)
        end = log.end_offset
        with pytest.raises(ValueError, match="milliseconds"):
            if how == "append":
                log.append(b"x", timestamp=secs)
            elif how == "batch":
                log.append_batch([Record(b"x", timestamp=secs)])
            elif how == "batch-mixed":
                log.append_batch([Record(b"a", timestamp=NOW()), Record(b"x", timestamp=secs)])
            else:
                log.append_batch([Record(b"a", key=b"k", timestamp=secs)] * 3)
        assert log.end_offset == end
        log.flush()
        # nothing was written: the data files are as they were
        assert {k: v for k, v in _tree(path).items() if k.endswith(".log")} == \
            {k: v for k, v in before.items() if k.endswith(".log")}


def test_future_timestamps_are_rejected(tmp_path):
    with Log.open(tmp_path / "l") as log:
        with pytest.raises(ValueError, match="after"):
            log.append(b"x", timestamp=NOW() + 2 * 3600 * 1000)
        log.append(b"x", timestamp=NOW() + 60_000)             # a minute ahead is fine
        assert log.end_offset == 1


def test_window_is_configurable_and_none_switches_it_off(tmp_path):
    with Log.open(tmp_path / "a", message_timestamp_before_max_ms=None,
                  message_timestamp_after_max_ms=None) as log:
        log.append(b"1970", timestamp=1000)
        log.append(b"far", timestamp=NOW() + 10**12)
        assert log.end_offset == 2
    with Log.open(tmp_path / "b", message_timestamp_before_max_ms=1000) as log:
        with pytest.raises(ValueError):
            log.append(b"x", timestamp=NOW() - 60_000)
        log.append(b"x", timestamp=NOW())
    with pytest.raises(InvalidConfigError):
        Log.open(tmp_path / "c", message_timestamp_after_max_ms=-1)


def test_a_misspelt_option_is_refused_with_the_name_it_resembles(tmp_path):
    path = tmp_path / "typo"
    with pytest.raises(InvalidConfigError,
                       match=r"segmnt_bytes \(did you mean segment_bytes\?\), zzz$"):
        Log.open(path, segmnt_bytes=1 << 20, zzz=1)
    assert not path.exists()        # refused before anything was made


def test_config_object_gives_every_setting_exclusive_writer(tmp_path):
    path = tmp_path / "l"
    cfg = LogConfig(segment_bytes=4096, retention_bytes=10_000, cleanup_policy="compact")
    with Log.open(path, config=cfg) as log:
        assert log.config == cfg
        log.append(b"v", key=b"k")
    with open(path / "seglog.json") as f:
        assert json.load(f)["config"] == dataclasses.asdict(cfg)
    with Log.open(path) as log:                 # stored, as options given by name are
        assert log.config == cfg
    # every setting given: a stored one the config leaves at its default goes back
    with Log.open(path, config=LogConfig()) as log:
        assert log.config == LogConfig()


def test_config_object_for_a_reader_applies_to_it_only(tmp_path):
    path = tmp_path / "l"
    with Log.open(path, segment_bytes=4096) as log:
        log.append(b"x")
    before = _tree(path)
    cfg = LogConfig(segment_bytes=8192, flush_ms=None)
    with Log.open(path, readonly=True, config=cfg) as r:
        assert r.config == cfg and r.end_offset == 1
    assert _tree(path) == before
    with Log.open(path) as log:
        assert log.config.segment_bytes == 4096


def test_config_object_with_several_writers(tmp_path):
    path = tmp_path / "l"
    cfg = LogConfig(segment_bytes=4096, retention_check_ms=None)
    with Log.open(path, multi_writer=True, config=cfg) as a:
        assert a.config == cfg
        with Log.open(path, multi_writer=True, config=cfg) as b:     # the same: joins
            assert b.config == cfg
            b.append(b"b")
        before = _tree(path)
        # a joining writer may not change what the others have
        with pytest.raises(InvalidConfigError, match="segment_bytes"):
            Log.open(path, multi_writer=True, config=LogConfig(segment_bytes=8192))
        assert _tree(path) == before
        assert a.end_offset == 1


@pytest.mark.parametrize("mode", [{}, {"multi_writer": True}, {"readonly": True}])
def test_config_object_beside_options_is_refused_naming_them(tmp_path, mode):
    path = tmp_path / "l"
    with pytest.raises(InvalidConfigError, match=r"flush_ms, segment_bytes given beside it"):
        Log.open(path, config=LogConfig(), segment_bytes=4096, flush_ms=None, **mode)
    assert not path.exists()        # refused before anything was made
    with Log.open(path):
        pass
    before = _tree(path)
    with pytest.raises(InvalidConfigError, match="segment_bytes"):
        Log.open(path, config=LogConfig(), segment_bytes=4096, **mode)
    assert _tree(path) == before


@pytest.mark.parametrize("mode", [{}, {"multi_writer": True}, {"readonly": True}])
@pytest.mark.parametrize("bad", [{"segment_bytes": 4096}, "segment_bytes=4096", 1])
def test_config_that_is_not_a_logconfig_is_a_type_error(tmp_path, mode, bad):
    path = tmp_path / "l"
    with pytest.raises(TypeError, match="config must be a LogConfig"):
        Log.open(path, config=bad, **mode)
    assert not path.exists()
