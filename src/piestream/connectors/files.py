"""The ``file`` (alias ``fs``) source connector: a directory of JSON-lines, CSV or Parquet files.

``WITH (connector = 'file', path = '<dir>', [match_pattern = '*.json'], [file.split.num = k])``
``FORMAT PLAIN ENCODE JSON | CSV (without_header = 'false', delimiter = ',') | PARQUET`` (or
``format = 'json' | 'csv' | 'parquet'`` in WITH).

New files are picked up as they appear; files are read in name order, JSON/CSV line by line
(a file may also grow by appended lines), Parquet row by row.

Determinism with a changing directory: an epoch reads only what the *committed* state says
exists. Each split's offset state maps every discovered file to ``[pos, line, size, stable]``
(bytes and lines consumed — rows for Parquet —, the size seen when it was last listed, and
whether that size was unchanged since the listing before). The epoch reads complete lines of
``[pos, size)`` from that committed view, then lists the directory and records what it sees for
the next epoch. A retried task therefore reads exactly the same bytes, whatever appeared in the
directory meanwhile. A last line without a newline is read once its file's size is stable.

Malformed records (bad JSON, a value that does not convert to its column's type, a CSV line with
the wrong number of fields, an unreadable Parquet file) are `BadRecord`s naming the file and
line: under ``error.handling = 'reject'`` (default) the epoch fails; under ``'dead_letter'`` they
go to the source's dead-letter table. They are never skipped silently.

Splits: with ``file.split.num = k`` a file belongs to split ``crc32(name) mod k``.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from piestream.common.epoch import EpochPair
from piestream.common.scalar import Datum, check_int, normalize_numeric, to_arrow
from piestream.common.text import parse_datum
from piestream.common.types import DataType, TypeKind
from piestream.connectors.options import InvalidOption, parse_bool, parse_int, source_limits
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.stream.connector import BadRecord, ReadResult, SourceReader

ENCODES = ("json", "csv", "parquet")
READ_BLOCK = 4 << 20  # bytes read from a file at a time

FileState = list[Any]  # [pos, line, size, stable]


# -- value conversion --------------------------------------------------------------------------------


class _BadValue(Exception):
    pass


def _from_json(v: Any, t: DataType) -> Datum:
    """A JSON value as a datum of `t` (strings use PostgreSQL's text input for the type)."""
    if v is None:
        return None
    k = t.kind
    if k is TypeKind.JSONB:
        return parse_datum(json.dumps(v), t)
    if k is TypeKind.VARCHAR:
        if isinstance(v, str):
            return v
        return json.dumps(v)
    if isinstance(v, str):
        return parse_datum(v, t)
    if isinstance(v, bool):
        if k is TypeKind.BOOLEAN:
            return v
        raise _BadValue(f"expected {t}, got a boolean")
    if isinstance(v, int | float):
        if k in (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT):
            if isinstance(v, float) and not v.is_integer():
                raise _BadValue(f"invalid input syntax for type {t}: {v!r}")
            return check_int(int(v), t)
        if k is TypeKind.NUMERIC:
            return normalize_numeric(v)
        if k in (TypeKind.REAL, TypeKind.DOUBLE):
            return float(v)
        raise _BadValue(f"expected {t}, got a number")
    if isinstance(v, dict) and k is TypeKind.STRUCT:
        return {f.name: _from_json(v.get(f.name), f.data_type) for f in t.fields}
    if isinstance(v, list) and k is TypeKind.LIST:
        assert t.elem is not None
        return [_from_json(e, t.elem) for e in v]
    raise _BadValue(f"expected {t}, got {type(v).__name__}")


def _from_text(s: str, t: DataType) -> Datum:
    if t.kind is TypeKind.VARCHAR:
        return s
    if s == "":
        return None
    return parse_datum(s, t)


# -- the reader ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileReader:
    path: str
    columns: tuple[tuple[str, DataType], ...]
    encode: str  # json | csv | parquet
    pattern: str = "*"
    split_num: int = 1
    csv_header: bool = True
    csv_delimiter: str = ","

    def splits(self) -> list[str]:
        return [str(i) for i in range(self.split_num)]

    # -- listing ---------------------------------------------------------------------------------------
    def _mine(self, name: str, split: int) -> bool:
        return (
            fnmatch.fnmatchcase(name, self.pattern)
            and not name.startswith((".", "_"))
            and zlib.crc32(name.encode()) % self.split_num == split
        )

    def _size_now(self, full: str) -> int | None:
        """Bytes (rows for Parquet) the file has now; None if it cannot be listed yet."""
        try:
            if self.encode == "parquet":
                return int(pq.ParquetFile(full).metadata.num_rows)
            return os.path.getsize(full)
        except FileNotFoundError:
            return None
        except Exception:
            return -1  # unreadable (e.g. a Parquet file still being written): recorded as such

    def _discover(self, split: int, files: dict[str, FileState]) -> None:
        """Record what the directory holds now (used by the *next* epoch)."""
        try:
            names = sorted(os.listdir(self.path))
        except FileNotFoundError:
            return
        for name in names:
            full = os.path.join(self.path, name)
            if not self._mine(name, split) or not os.path.isfile(full):
                continue
            size = self._size_now(full)
            if size is None:
                continue
            st = files.get(name)
            if st is None:
                files[name] = [0, 0, size, False]
                continue
            st[3] = size == st[2]  # unchanged since the last listing
            st[2] = max(st[2], size)  # grown or became readable; a shrunk file keeps what we knew

    # -- reading ---------------------------------------------------------------------------------------
    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        s = int(split)
        files: dict[str, FileState] = json.loads(offset)["f"] if offset else {}
        batches: list[pa.RecordBatch] = []
        bad: list[BadRecord] = []
        used = 0
        for name in sorted(files):
            if used >= budget:
                break
            st = files[name]
            full = os.path.join(self.path, name)
            if st[2] < 0:
                if st[3]:  # unreadable at two listings in a row: report it once, then skip it
                    bad.append(BadRecord(name, 0, "", f"cannot read file as {self.encode}"))
                    files[name] = [0, 0, 0, True]
                    used += 1
                continue
            if not os.path.exists(full):  # removed by the user: nothing more to read from it
                st[0] = st[2]
                continue
            if self.encode == "parquet":
                used += self._read_parquet(name, full, st, budget - used, batches, bad)
            else:
                used += self._read_lines(name, full, st, budget - used, batches, bad)
        self._discover(s, files)
        return ReadResult(batches, json.dumps({"f": files}, sort_keys=True), used, bad)

    def _read_lines(
        self,
        name: str,
        full: str,
        st: FileState,
        budget: int,
        batches: list[pa.RecordBatch],
        bad: list[BadRecord],
    ) -> int:
        pos, line_no, size, stable = st
        if pos >= size:
            return 0
        header = self._csv_header(full) if self.encode == "csv" and self.csv_header else None
        lines: list[tuple[int, str]] = []
        used = 0
        with open(full, "rb") as f:
            f.seek(pos)
            while used < budget and pos < size:
                block = f.read(min(READ_BLOCK, size - pos))
                if not block:
                    break
                start = 0
                while used < budget:
                    nl = block.find(b"\n", start)
                    if nl < 0:
                        rest = block[start:]
                        if pos + start + len(rest) >= size and stable and rest:
                            nl = len(block)  # the file's last line, without a newline, is complete
                        else:
                            break
                    raw = block[start:nl]
                    line_no += 1
                    used += 1
                    start = nl + 1
                    text = raw.decode("utf-8", errors="replace").rstrip("\r")
                    if text.strip() and not (header is not None and line_no == 1):
                        lines.append((line_no, text))
                advanced = min(start, len(block))
                pos += advanced
                f.seek(pos)
                if advanced == 0:
                    break
        st[0], st[1] = pos, line_no
        if lines:
            parse = self._parse_json if self.encode == "json" else self._csv_parser(header)
            rows: list[list[Datum]] = []
            for ln, text in lines:
                try:
                    rows.append(parse(text))
                except Exception as e:  # any conversion problem is this record's, reported
                    bad.append(BadRecord(name, ln, text, _message(e)))
            if rows:
                batches.append(self._batch(rows))
        return used

    def _csv_header(self, full: str) -> list[str]:
        with open(full, "rb") as f:
            first = f.readline().decode("utf-8", errors="replace").rstrip("\r\n")
        return next(csv.reader([first], delimiter=self.csv_delimiter), [])

    def _parse_json(self, text: str) -> list[Datum]:
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise _BadValue(f"expected a JSON object, got {type(obj).__name__}")
        lower = None
        out = []
        for c, t in self.columns:
            if c in obj:
                v = obj[c]
            else:
                if lower is None:
                    lower = {k.lower(): val for k, val in obj.items()}
                v = lower.get(c.lower())
            try:
                out.append(_from_json(v, t))
            except Exception as e:
                raise _BadValue(f'column "{c}": {_message(e)}') from None
        return out

    def _csv_parser(self, header: list[str] | None) -> Callable[[str], list[Datum]]:
        if header is not None:
            pos = {h.strip().lower(): i for i, h in enumerate(header)}
            idx = [pos.get(c.lower()) for c, _ in self.columns]
            width = len(header)
        else:
            idx = list(range(len(self.columns)))
            width = len(self.columns)

        def parse(text: str) -> list[Datum]:
            fields = next(csv.reader([text], delimiter=self.csv_delimiter))
            if len(fields) != width:
                raise _BadValue(f"expected {width} fields, got {len(fields)}")
            out = []
            for (c, t), i in zip(self.columns, idx, strict=True):
                try:
                    out.append(None if i is None else _from_text(fields[i], t))
                except Exception as e:
                    raise _BadValue(f'column "{c}": {_message(e)}') from None
            return out

        return parse

    def _batch(self, rows: list[list[Datum]]) -> pa.RecordBatch:
        cols = [to_arrow([r[i] for r in rows], t) for i, (_, t) in enumerate(self.columns)]
        return pa.RecordBatch.from_arrays(cols, names=[c for c, _ in self.columns])

    def _read_parquet(
        self,
        name: str,
        full: str,
        st: FileState,
        budget: int,
        batches: list[pa.RecordBatch],
        bad: list[BadRecord],
    ) -> int:
        pos, _, size, _ = st
        if pos >= size:
            return 0
        try:
            pf = pq.ParquetFile(full)
            want = min(size, pos + budget)
            start = 0
            for g in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                lo, hi = max(pos, start), min(want, start + n)
                if lo < hi:
                    t = pf.read_row_group(g)
                    batches.extend(self._convert_parquet(t.slice(lo - start, hi - lo)).to_batches())
                start += n
                if start >= want:
                    break
        except Exception as e:
            bad.append(BadRecord(name, pos + 1, "", f"cannot read Parquet rows: {_message(e)}"))
            st[0] = size
            return max(1, min(budget, size - pos))
        st[0] = want
        st[1] = want
        return want - pos

    def _convert_parquet(self, t: pa.Table) -> pa.Table:
        names = {n.lower(): n for n in t.column_names}
        cols = []
        for c, dtype in self.columns:
            src = names.get(c.lower())
            if src is None:
                cols.append(pa.nulls(t.num_rows, dtype.arrow))
            else:
                cols.append(t.column(src).cast(dtype.arrow))
        return pa.Table.from_arrays(cols, names=[c for c, _ in self.columns])


def _message(e: BaseException) -> str:
    return getattr(e, "message", None) or str(e) or type(e).__name__


def file_connector(spec: SourceSpec) -> tuple[SourceReader, SourceLimits]:
    path = spec.option("path", "fs.path", "dir")
    if not path:
        raise InvalidOption("the file connector needs a path = '<directory>' option")
    if not os.path.isdir(path):
        raise InvalidOption(f'path "{path}" is not a directory')
    encode = (spec.encode or spec.option("format", "encode") or "").strip().lower()
    if encode in {"ndjson", "jsonl"}:
        encode = "json"
    if encode not in ENCODES:
        raise InvalidOption(
            "the file connector needs FORMAT PLAIN ENCODE JSON | CSV | PARQUET (or format = ...)"
        )
    if spec.generated:
        raise InvalidOption("generated columns are not supported in a file source")
    eo = {k.lower(): v for k, v in spec.encode_options.items()}
    without_header = eo.get("without_header", spec.option("csv.without_header", default="false") or "false")
    delimiter = eo.get("delimiter", spec.option("csv.delimiter", default=",") or ",")
    if len(delimiter) != 1:
        raise InvalidOption("the CSV delimiter must be one character")
    reader = FileReader(
        path=os.path.abspath(path),
        columns=tuple(spec.columns),
        encode=encode,
        pattern=spec.option("match_pattern", "pattern", "match.pattern", default="*") or "*",
        split_num=parse_int("file.split.num", spec.option("file.split.num", default="1") or "1", minimum=1),
        csv_header=not parse_bool("without_header", without_header),
        csv_delimiter=delimiter,
    )
    return reader, source_limits(spec)
