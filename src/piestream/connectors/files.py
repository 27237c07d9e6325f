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
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from piestream.common.epoch import EpochPair
from piestream.common.types import DataType
from piestream.connectors.formats.decode import CsvDecoder, JsonDecoder, message
from piestream.connectors.options import InvalidOption, parse_bool, parse_int, source_limits
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.stream.connector import BadRecord, ReadResult, SourceReader

ENCODES = ("json", "csv", "parquet")
READ_BLOCK = 4 << 20  # bytes read from a file at a time

FileState = list[Any]  # [pos, line, size, stable]


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
            decoded = self._decoder(header).decode([text.encode() for _, text in lines])
            bad += [BadRecord(name, lines[i][0], lines[i][1], m) for i, m in decoded.errors]
            if decoded.table.num_rows:
                batches += decoded.table.to_batches()
        return used

    def _decoder(self, header: list[str] | None) -> JsonDecoder | CsvDecoder:
        if self.encode == "json":
            return JsonDecoder(self.columns)
        return CsvDecoder(self.columns, self.csv_delimiter, None if header is None else tuple(header))

    def _csv_header(self, full: str) -> list[str]:
        with open(full, "rb") as f:
            first = f.readline().decode("utf-8", errors="replace").rstrip("\r\n")
        return next(csv.reader([first], delimiter=self.csv_delimiter), [])

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
            bad.append(BadRecord(name, pos + 1, "", f"cannot read Parquet rows: {message(e)}"))
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
