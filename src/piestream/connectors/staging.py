"""Staged sink output the driver has not published yet, kept across a failed publish.

A sink's state table names, per actor, only the newest epoch it staged (`plan.sink`). The
driver publishes right after each commit, so normally every named file is published before the
next epoch can name another. When a publish fails without a crash (a lake commit refused, a
rename failing), the next epoch may overwrite those names; the staged files would then look like
orphans of failed attempts and be deleted, and their rows would never reach the sink. So a failed
publish writes what it could not finish to ``_pending.json`` in the staging directory (atomically,
beside the staged files it names), and every publish takes those entries first, until one
succeeds and clears the file. After a crash the file is still there, so nothing is lost either.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable

PENDING = "_pending.json"

#: one staged output: (actor_index, epoch, token, rows), as the sink state table holds it
Staged = tuple[int, int, str, int]


def named_outputs(staging: str, committed_epoch: int, state_rows: Iterable[tuple]) -> list[Staged]:
    """What is to be published: entries a failed publish left pending, then the outputs the
    committed state names (epochs up to `committed_epoch`), each once, in epoch order."""
    out: dict[tuple[int, int, str], Staged] = {}
    for actor, epoch, token, rows in [*load_pending(staging), *state_rows]:
        if token is None or epoch > committed_epoch:
            continue
        key = (int(actor), int(epoch), str(token))
        out.setdefault(key, (key[0], key[1], key[2], int(rows or 0)))
    return sorted(out.values(), key=lambda s: (s[1], s[0]))


def load_pending(staging: str) -> list[Staged]:
    try:
        with open(os.path.join(staging, PENDING)) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return []
    if doc.get("format") != 1:
        raise ValueError(f"{os.path.join(staging, PENDING)}: unknown format {doc.get('format')!r}")
    return [(int(a), int(e), str(t), int(n)) for a, e, t, n in doc["outputs"]]


def save_pending(staging: str, outputs: Iterable[Staged]) -> None:
    """Record outputs still to publish (their staged files exist); written whole or not at all."""
    left = [s for s in outputs if os.path.exists(os.path.join(staging, s[2]))]
    if not left:
        clear_pending(staging)
        return
    os.makedirs(staging, exist_ok=True)
    tmp = os.path.join(staging, PENDING + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"format": 1, "outputs": [list(s) for s in left]}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(staging, PENDING))


def clear_pending(staging: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(staging, PENDING))


def delete_staged(staging: str, up_to_epoch: int) -> int:
    """Delete staged files of epochs up to `up_to_epoch` (published ones are gone already; the
    rest came from failed or duplicate attempts). Returns how many were deleted."""
    try:
        names = os.listdir(staging)
    except FileNotFoundError:
        return 0
    deleted = 0
    for name in names:
        head = name.lstrip(".").split("-", 1)[0]
        if head.isdigit() and int(head) <= up_to_epoch:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(staging, name))
                deleted += 1
    return deleted
