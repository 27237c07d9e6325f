"""Entry points: a SQL script in, statements out, errors as PostgreSQL reports them.

The whole script is tokenized once, so every token (and every position sqlglot records on a node)
is an offset into the text the user sent; the script is then cut at ``;`` and each statement
parsed on its own, which keeps sqlglot's parser state from leaking across statements.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace

import numpy as np
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from piestream.common.errors import PiestreamError, SyntaxError_
from piestream.frontend.parser import ast
from piestream.frontend.parser.dialect import Piestream, PiestreamParser
from piestream.frontend.parser.errors import TokenFailure, lexical_error, syntax_error


class _DropSqlglotChatter(logging.Filter):
    """sqlglot logs warnings ("falling back to parsing as a Command", index offsets) meant for
    transpiler users; piestream turns every problem into an error instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


logging.getLogger("sqlglot").addFilter(_DropSqlglotChatter())

DIALECT = Piestream()


def parse(sql: str) -> list[ast.Statement]:
    """Parse a script of ``;``-separated statements (empty statements and comments allowed).

    Raises `SyntaxError_` (42601) with PostgreSQL's message and 1-based `position`, or
    `FeatureNotSupported` (0A000) for valid statements piestream does not implement.
    """
    return [statement for statement, _ in _parse_located(sql)]


def parse_one(sql: str) -> ast.Statement:
    """Parse exactly one statement (a trailing ``;`` is fine)."""
    fast = _param_rows_insert(sql)
    if fast is not None:
        return fast
    statements = _parse_located(sql)
    if not statements:
        raise SyntaxError_("syntax error at end of input", position=len(sql) + 1)
    if len(statements) > 1:
        raise SyntaxError_(
            "cannot insert multiple commands into a prepared statement", position=statements[1][1] + 1
        )
    return statements[0][0]


_PARAM_TUPLE = r"\(\s*\$\d+(?:\s*,\s*\$\d+)*\s*\)"
#: what may follow the last VALUES keyword: tuples of bare parameters, then an optional ``;``
_PARAM_ROWS = re.compile(rf"\s*({_PARAM_TUPLE}(?:\s*,\s*{_PARAM_TUPLE})*)\s*;?\s*")
_PARAM = re.compile(r"\$(\d+)")
_TUPLE = re.compile(_PARAM_TUPLE)


def _param_rows_insert(sql: str) -> ast.Insert | None:
    """``INSERT ... VALUES ($1, $2), ($3, $4), ...`` (bare parameters only) without parsing every
    row: the text up to the first row is parsed as usual and must be a plain one-row VALUES
    INSERT; the rows become a grid of parameter indices (`ast.Insert.param_rows`). None for any
    other statement, or when the rows' widths differ (the full parse then reports it)."""
    at = sql.lower().rfind("values")  # the rows hold no letters: their VALUES is the last one
    if at < 0:
        return None
    rows = _PARAM_ROWS.fullmatch(sql, at + len("values"))
    if rows is None:
        return None
    tuples = _TUPLE.findall(sql, rows.start(1), rows.end(1))  # one regex step per row, no tree
    width = tuples[0].count("$")
    if any(t.count("$") != width for t in tuples):
        return None  # rows of different widths
    indices = [int(n) - 1 for n in _PARAM.findall(sql, rows.start(1), rows.end(1))]
    try:
        located = _parse_located(sql[: rows.start(1)] + tuples[0])
    except PiestreamError:
        return None
    if len(located) != 1:
        return None
    stmt, start = located[0]
    if not (
        isinstance(stmt, ast.Insert)
        and isinstance(stmt.source, exp.Values)
        and len(stmt.source.expressions) == 1
        and not stmt.returning
    ):
        return None
    grid = np.array(indices, dtype=np.int64).reshape(-1, width)
    return replace(stmt, text=sql[start : rows.end(1)], param_rows=grid)


def _parse_located(sql: str) -> list[tuple[ast.Statement, int]]:
    """The statements of `sql`, each with the 0-based offset of its first token."""
    tokens = _tokenize(sql)
    parser = DIALECT.parser()
    assert isinstance(parser, PiestreamParser)
    statements: list[tuple[ast.Statement, int]] = []
    for chunk, terminator in _split(tokens):
        try:
            statement = parser.parse_tokens(chunk, sql)
        except TokenFailure as failure:
            raise syntax_error(sql, failure, terminator) from None
        except ParseError as error:  # raised by sqlglot without going through raise_error
            blamed = parser._curr or None
            raise syntax_error(sql, TokenFailure(str(error), blamed), terminator) from None
        text = sql[chunk[0].start : chunk[-1].end + 1]
        statements.append((replace(statement, text=text), chunk[0].start))
    return statements


def _tokenize(sql: str) -> list[Token]:
    tokenizer = DIALECT.tokenizer()
    try:
        return tokenizer.tokenize(sql)
    except TokenError as error:
        core = getattr(tokenizer, "_core", None)
        start = getattr(core, "_start", None)
        cause = error.__cause__
        unterminated = isinstance(cause, IndexError) or str(cause).startswith("Missing")
        raise lexical_error(sql, start if isinstance(start, int) else None, unterminated) from None


def _split(tokens: list[Token]) -> list[tuple[list[Token], Token | None]]:
    """Statements' tokens, each with the ``;`` that ends it (None for the last, unterminated one)."""
    chunks: list[tuple[list[Token], Token | None]] = []
    current: list[Token] = []
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            if current:
                chunks.append((current, token))
            current = []
        else:
            current.append(token)
    if current:
        chunks.append((current, None))
    return chunks
