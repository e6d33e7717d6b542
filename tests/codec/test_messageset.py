"""MessageSet: views, validation, zero-copy sending, in-memory construction."""

from __future__ import annotations

import os
import socket

import pytest

import seglog
from seglog import Log, MessageSet, Record


def test_from_records_in_memory():
    ms = MessageSet.from_records([b"a", Record(b"b", key=b"k", timestamp=7), Record(None, key=b"t")],
                                 base_offset=100, timestamp=5)
    msgs = list(ms)
    assert [m.offset for m in msgs] == [100, 101, 102]
    assert [m.value for m in msgs] == [b"a", b"b", None]
    assert msgs[1].timestamp == 7 and msgs[0].timestamp == 5
    assert len(ms) == 3 and ms.first_offset == 100 and ms.next_offset == 103
    assert ms.values() == [b"a", b"b", None]
    ms.validate()
    assert MessageSet.from_records([], base_offset=4).next_offset == 4
    packed = MessageSet.from_records([b"xyz" * 100] * 10, compression="lz4")
    assert packed.size_in_bytes < 300 and packed.values() == [b"xyz" * 100] * 10
    with pytest.raises(TypeError):
        MessageSet.from_records(["str"])


def test_buffer_is_a_read_only_zero_copy_view(logdir):
    with Log.open(logdir) as log:
        log.append_batch([b"one", b"two"])
        ms = log.read(0)
        view = ms.buffer()
        assert isinstance(view, memoryview) and view.readonly
        assert len(view) == ms.size_in_bytes
        assert MessageSet(bytes(view)).values() == [b"one", b"two"]


def test_write_to_sends_raw_batches_with_sendfile(logdir, tmp_path):
    with Log.open(logdir) as log:
        log.append_batch([os.urandom(100) for _ in range(20)])
        log.append(b"last")
        ms = log.read(0)
        out = tmp_path / "copy.bin"
        with open(out, "wb") as f:
            assert ms.write_to(f) == ms.size_in_bytes
        assert MessageSet(out.read_bytes()).values() == ms.values()
        a, b = socket.socketpair()
        try:
            sent = ms.write_to(a)
            got = b""
            while len(got) < sent:
                got += b.recv(65536)
        finally:
            a.close()
            b.close()
        assert got == bytes(ms.buffer())
        r, w = os.pipe()
        mem = MessageSet.from_records([b"in memory"])
        assert mem.write_to(w) == mem.size_in_bytes
        os.close(w)
        assert os.read(r, 1000) == bytes(mem.buffer())
        os.close(r)


def test_validate_finds_damage():
    good = MessageSet.from_records([b"a" * 50, b"b" * 50])
    data = bytearray(good.buffer())
    data[-3] ^= 0x40
    bad = MessageSet(bytes(data))
    with pytest.raises(seglog.CorruptRecordError):
        bad.validate()
    with pytest.raises(seglog.CorruptRecordError):
        list(bad)
    with pytest.raises(seglog.CorruptRecordError):
        MessageSet(bytes(good.buffer())[:-1]).validate()


def test_len_counts_only_messages_at_or_after_the_offset(logdir):
    with Log.open(logdir) as log:
        log.append_batch([b"%d" % i for i in range(10)])
        log.append_batch([b"%d" % i for i in range(10, 20)])
        ms = log.read(5)
        assert len(ms) == 15 and ms.first_offset == 5 and ms.next_offset == 20
        assert "MessageSet" in repr(ms)


def test_a_message_is_made_by_its_fields_and_equals_the_one_read(tmp_path):
    import copy
    import pickle
    from seglog import Message
    with Log.open(tmp_path / "l", message_timestamp_before_max_ms=None) as log:
        log.append(b"v", key=b"k", timestamp=1234, headers=[("h", b"1"), ("i", b"")])
        log.append(None, key=b"gone", timestamp=1235)
        read = list(log.iter())
    by_position = Message(0, 1234, b"k", b"v", [("h", b"1"), ("i", b"")])
    by_keyword = Message(offset=0, timestamp=1234, key=b"k", value=b"v",
                         headers=(("h", b"1"), ("i", b"")))
    tombstone = Message(1, 1235, b"gone", None)               # headers default to ()
    assert read == [by_position, tombstone] and by_keyword == by_position
    for m in (by_position, by_keyword, tombstone, *read):
        assert type(m) is Message
    assert by_position.headers == (("h", b"1"), ("i", b"")) and tombstone.headers == ()
    assert (by_keyword.offset, by_keyword.timestamp, by_keyword.key, by_keyword.value) == \
        (0, 1234, b"k", b"v")
    assert by_position._asdict() == {"offset": 0, "timestamp": 1234, "key": b"k",
                                     "value": b"v", "headers": (("h", b"1"), ("i", b""))}
    assert repr(tombstone) == \
        "Message(offset=1, timestamp=1235, key=b'gone', value=None, headers=())"
    for m in read:          # pickle and copy build a Message from its fields again
        for again in (pickle.loads(pickle.dumps(m)), copy.copy(m), copy.deepcopy(m)):
            assert again == m and type(again) is Message
    with pytest.raises(TypeError):
        Message(0, 1234, b"k")                              # a field missing
    with pytest.raises(TypeError):
        Message((0, 1234, b"k", b"v", ()))                  # not one tuple: its fields
    with pytest.raises(TypeError):
        Message(0, 1234, b"k", b"v", (), "extra")
    with pytest.raises(TypeError):
        Message(0, 1234, b"k", b"v", offset=1)
