"""Writes golden/jsonb_pg15.json: the answers of a real PostgreSQL 15 to jsonb_cases (not a test).

Run against a scratch server: ``.venv/bin/python tests/sql/make_jsonb_golden.py 'host=/tmp port=5432
user=postgres'``. Values are kept as PostgreSQL's text (jsonb and text alike), booleans and integers
as JSON's; an error as its SQLSTATE and message."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psycopg
from jsonb_cases import EXPRESSIONS, TABLE, documents, jsonpath_queries, table_queries
from psycopg.types.string import TextLoader


def _run(conn: psycopg.Connection, sql: str) -> dict[str, Any]:
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            rows = [list(r) for r in cur.fetchall()]
            types = [d.type_code for d in cur.description or []]
        return {"sql": sql, "rows": rows, "oids": types}
    except psycopg.Error as e:
        conn.rollback()
        return {"sql": sql, "sqlstate": e.sqlstate, "message": e.diag.message_primary}


def main(dsn: str) -> None:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.adapters.register_loader("jsonb", TextLoader)
    conn.execute("DROP TABLE IF EXISTS docs")
    conn.execute(TABLE)
    docs = documents()
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO docs VALUES (%s, %s::jsonb)", list(enumerate(docs)))
    out = {
        "server": conn.execute("SHOW server_version").fetchone()[0],  # type: ignore[index]
        "docs": docs,
        "queries": [_run(conn, q) for q in table_queries()],
        "expressions": [_run(conn, f"SELECT {e}") for e in [*EXPRESSIONS, *jsonpath_queries()]],
    }
    conn.execute("DROP TABLE docs")
    path = Path(__file__).parent / "golden" / "jsonb_pg15.json"
    lines = [
        json.dumps({k: v for k, v in out.items() if k not in ("queries", "expressions")}, ensure_ascii=False)
    ]
    lines += [json.dumps({"query": q}, ensure_ascii=False) for q in out["queries"]]
    lines += [json.dumps({"expression": e}, ensure_ascii=False) for e in out["expressions"]]
    path.write_text("\n".join(lines) + "\n")  # one case a line, for readable diffs


if __name__ == "__main__":
    main(sys.argv[1])
