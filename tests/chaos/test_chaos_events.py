"""Reading journals: what was written comes back, torn or bad lines end a journal, and
repeated strings are shared (a history of a million events must fit in memory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdq_compliance.chaos import events as ev_mod
from rdq_compliance.chaos.events import Journal, read_history, read_journal


def _write(path: Path, proc: str, n: int) -> list[dict]:
    journal = Journal(path, proc)
    try:
        out = []
        for i in range(n):
            task, token = f"t{i % 7:05d}", f"{i % 5:032x}"
            if i % 10 == 0:
                out.append(
                    journal.write(
                        "ok", "claim", claims=[{"task": task, "token": token, "claimed_at": i}]
                    )
                )
            else:
                out.append(journal.write("ok", "heartbeat", task=task, token=token, n=i))
        return out
    finally:
        journal.close()


@pytest.mark.parametrize("chunk", [1 << 20, 64])
def test_what_was_written_is_read_back_in_order(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(ev_mod, "CHUNK_BYTES", chunk)  # 64: a chunk per line or two
    written = _write(tmp_path / "w0.jsonl", "w0", 250)
    assert list(read_journal(tmp_path / "w0.jsonl")) == written


@pytest.mark.parametrize("chunk", [1 << 20, 64])
def test_a_torn_last_line_is_skipped(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(ev_mod, "CHUNK_BYTES", chunk)
    path = tmp_path / "w0.jsonl"
    written = _write(path, "w0", 30)
    with open(path, "ab") as fh:
        fh.write(b'{"seq":30,"proc":"w0","ty')
    assert list(read_journal(path)) == written


@pytest.mark.parametrize("chunk", [1 << 20, 64])
def test_a_bad_line_ends_the_journal(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(ev_mod, "CHUNK_BYTES", chunk)
    path = tmp_path / "w0.jsonl"
    lines = path.with_suffix(".tmp")
    written = _write(lines, "w0", 20)
    raw = lines.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*raw[:12], b"not json\n", *raw[12:]]))
    assert list(read_journal(path)) == written[:12]
    path.write_bytes(b"".join([*raw[:5], b"1,2\n", *raw[5:]]))  # two values on one line
    assert list(read_journal(path)) == written[:5]


def test_repeated_strings_are_shared_across_events_and_journals(tmp_path):
    _write(tmp_path / "w0.jsonl", "w0", 40)
    _write(tmp_path / "w1.jsonl", "w1", 40)
    events = read_history(tmp_path.glob("*.jsonl"))
    assert len(events) == 80
    by_value: dict[str, set[int]] = {}
    for e in events:  # values: one object each in the whole history
        for key in ("proc", "type", "op", "task", "token"):
            if key in e:
                by_value.setdefault(e[key], set()).add(id(e[key]))
        for c in e.get("claims", ()):
            by_value.setdefault(c["token"], set()).add(id(c["token"]))
    assert all(len(ids) == 1 for ids in by_value.values()), {
        v: len(ids) for v, ids in by_value.items() if len(ids) > 1
    }
    for proc in ("w0", "w1"):  # keys and the pid: one object each per journal
        mine = [e for e in events if e["proc"] == proc]
        keys: dict[str, set[int]] = {}
        for e in mine:
            for k in e:
                keys.setdefault(k, set()).add(id(k))
        assert all(len(ids) == 1 for ids in keys.values())
        assert len({id(e["pid"]) for e in mine}) == 1


def test_values_of_any_json_type_are_read_as_written(tmp_path):
    path = tmp_path / "w0.jsonl"
    path.write_bytes(b'{"task":["a"],"token":null,"pid":1.5,"claims":"x"}\n[1,2]\n"s"\n')
    assert list(read_journal(path)) == [
        {"task": ["a"], "token": None, "pid": 1.5, "claims": "x"},
        [1, 2],
        "s",
    ]
