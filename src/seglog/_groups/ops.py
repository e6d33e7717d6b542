"""What a member does under ``group.lock`` (docs/GROUPS.md): the group's critical
sections, as functions of its files: the rebalance, a claim, the commit fence and
a release. Each re-reads the files it decides on; none runs a user callback, opens
a log, logs or waits for another lock (only small reads, atomic writes and
non-blocking probes of member files), so a member stopped inside one stalls nobody
for longer than its lock is held.
"""

from __future__ import annotations

from typing import Any, Iterable

from .assignors import TP, assign
from .files import GroupFiles, State, committed_offset, key, topics_matching
from ..errors import CommitFailedError, InvalidConfigError
from ..topic import read_partition_count


def partition_counts(root: str, topics: Iterable[str]) -> dict[str, int]:
    """The partition counts of the topics that exist (a topic not created yet has
    none: its subscribers wait for it)."""
    out = {}
    for t in topics:
        n = read_partition_count(root, t)
        if n is not None:
            out[t] = n
    return out


def rebalance(files: GroupFiles, root: str, me: str, my_topics: list[str] | None,
              session_s: float, assignor: str) -> State:
    """The current state, or a new generation if membership changed (dead and
    silent members out, ``me`` in, or out with ``my_topics`` None), a member's
    subscription changed or a subscribed topic appeared or went.

    A member subscribed by pattern (its file names the pattern) subscribes to the
    topics that match it now, whoever computes the generation: the topic one
    member sees created is in the next generation for every member whose pattern
    matches it. The group keeps the assignor it has while any member is live: a
    member joining with another is refused (``InvalidConfigError``). The offsets of
    a topic deleted since the last generation go with it. Dead members' files and
    killed joiners' half-made ones are removed."""
    st = files.state(assignor)
    files.tidy_joins()
    live: dict[str, list[str]] = {}
    for m in sorted(set(st.members) | set(files.member_files())):
        if m == me:
            continue
        if files.probe(m, session_s, tidy=True) == "alive":
            info = files.member_info(m)
            if info is not None and info.pattern is not None:
                topics: list[str] | None = topics_matching(root, info.pattern)
            else:
                topics = st.members.get(m)
                if topics is None:
                    topics = None if info is None else info.topics
            if topics is not None:
                live[m] = list(topics)
    if live and assignor != st.assignor and my_topics is not None and me not in st.members:
        raise InvalidConfigError(
            f"group {files.group!r} uses the {st.assignor!r} assignor; member {me!r} asked "
            f"for {assignor!r}: every member of a group must use the same one")
    if my_topics is not None:
        live[me] = my_topics
    counts = partition_counts(root, sorted({t for ts in live.values() for t in ts}))
    deleted = {t for t in st.partitions or {} if read_partition_count(root, t) is None}
    if deleted:
        offsets = files.offsets()
        kept = {k: v for k, v in offsets.items() if k.rpartition("/")[0] not in deleted}
        if kept != offsets:
            files.write_offsets(kept)
    if live == st.members and counts == st.partitions:
        return st
    group_assignor = st.assignor if set(live) - {me} else assignor
    new = State(st.generation + 1, live, assign(group_assignor, live, counts, st.assignment),
                group_assignor, counts)
    files.write_state(new)
    # partitions held by members no longer in the group are free at once
    owners = files.owners()
    kept_owners = {k: v for k, v in owners.items() if v[0] in live}
    if kept_owners != owners:
        files.write_owners(kept_owners)
    return new


def claim(files: GroupFiles, me: str, generation: int, want: list[TP], assignor: str
          ) -> tuple[list[TP], dict[str, list[Any]]] | None:
    """Claim those of ``want`` that no live member of ``generation`` still holds:
    the ones claimed and the committed offsets; None if the group is at another
    generation (adopt it first)."""
    st = files.state(assignor)
    if st.generation != generation:
        return None
    owners = files.owners()
    got = []
    changed = False
    for tp in want:
        holder = owners.get(key(tp))
        if holder is not None and holder[0] != me and holder[0] in st.members:
            continue           # its owner has not given it up yet
        got.append(tp)
        if holder != [me, generation]:
            owners[key(tp)] = [me, generation]
            changed = True
    if changed:
        files.write_owners(owners)
    return got, files.offsets()


def commit(files: GroupFiles, me: str, generation: int, assignor: str, todo: dict[TP, int],
           seeked: set[TP], ids: dict[TP, str | None]) -> None:
    """The fence, then the offsets that move (each with the id of the log it is of):
    ``CommitFailedError`` unless ``me`` is a member of the current generation holding
    every partition's claim. An offset below the committed one is written only for
    a partition in ``seeked``."""
    st = files.state(assignor)
    if me not in st.members:
        raise CommitFailedError(
            f"consumer {me} of group {files.group!r} (generation {generation}) is not a "
            f"member of generation {st.generation}: it was expelled; commit refused, it "
            f"rejoins at its next poll")
    owners = files.owners()
    for tp in todo:
        holder = owners.get(key(tp))
        if holder is None or holder[0] != me:
            raise CommitFailedError(f"consumer {me} no longer owns {tp[0]}-{tp[1]}: commit "
                                    f"refused")
    offsets = files.offsets()
    changed = False
    for tp, pos in todo.items():
        ident = ids.get(tp)
        cur = offsets.get(key(tp))
        if cur is not None and committed_offset(cur, ident) is not None and (
                cur[0] == pos or (pos < cur[0] and tp not in seeked)):
            continue
        offsets[key(tp)] = [pos, st.generation] + ([ident] if ident is not None else [])
        changed = True
    if changed:
        files.write_offsets(offsets)


def release(files: GroupFiles, me: str, tps: Iterable[TP]) -> None:
    """Drop ``me``'s claims of ``tps``: their next owners may take them."""
    owners = files.owners()
    mine = [k for k in map(key, tps) if k in owners and owners[k][0] == me]
    for k in mine:
        del owners[k]
    if mine:
        files.write_owners(owners)
