"""The piestream SQL dialect: sqlglot's PostgreSQL dialect with RisingWave's statements.

What differs from sqlglot's Postgres dialect, and why:
- Tokenizer: ``$`` followed by a digit is always a parameter (``$1``), never a dollar quote. sqlglot
  reads ``$1,$2`` (psycopg's parameters without spaces) as a quote tagged ``1,`` and then fails
  with "unterminated dollar-quoted string"; in PostgreSQL a tag cannot start with a digit.
- Tokenizer: no "command" keywords. sqlglot swallows the rest of a statement after EXPLAIN, SHOW,
  RESET, DO, ... into one opaque string (its `Command` fallback); piestream parses those statements
  itself, and the words become ordinary identifiers elsewhere, as in PostgreSQL.
- Statements: CREATE / DROP / INSERT / UPDATE / DELETE / SET / SHOW / ... are dispatched to
  piestream's own statement parsers (`ddl`, `dml`, `utility`), which produce `ast` dataclasses.
  Queries are parsed by sqlglot unchanged, except that a bare ``*`` takes no alias, T-SQL table
  hints are off (``WITH (...)`` after a FROM belongs to CREATE SINK) and ``EMIT ON WINDOW CLOSE``
  is recognized (and rejected as unsupported).
- Array subscripts are kept as written (INDEX_OFFSET 0). sqlglot's Postgres dialect rewrites
  ``a[1]`` to a 0-based ``a[0]`` only when it can infer the operand is an array and the index
  an integer, leaving ``a[i]`` alone; a subscript here is always PostgreSQL's 1-based one.
- ``->`` and ``->>`` keep their right operand as written. sqlglot turns a literal operand into a
  JSONPath (``j -> 'a.b'`` a path of two keys, ``j -> '1'`` an index), which is not PostgreSQL's
  jsonb operator: its operand is one key (text) or one array index (integer). And ``->`` is never
  a lambda arrow: ``count(x -> 'k')`` is jsonb access in a function argument.
- Window specs take RisingWave's session frame, ``OVER (PARTITION BY ... ORDER BY t SESSION WITH
  GAP <expr>)``, as a `exp.WindowSpec` of kind ``SESSION`` with the gap as its start.
- Functions whose sqlglot builders rewrite their arguments (TO_CHAR's format string becomes
  strftime, GENERATE_SERIES' step an interval, DIV a cast, ARRAY_PREPEND's arguments swap, ...)
  parse as plain `exp.Anonymous` calls with PostgreSQL's name and arguments as written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.generators.postgres import PostgresGenerator
from sqlglot.tokenizer_core import TokenizerCore
from sqlglot.tokens import Token, TokenType

from piestream.frontend.parser import ast
from piestream.frontend.parser.base import ParserBase
from piestream.frontend.parser.ddl_syntax import DdlParser
from piestream.frontend.parser.dml import DmlParser
from piestream.frontend.parser.utility import UtilityParser

#: PostgreSQL / RisingWave statements piestream does not implement (FeatureNotSupported, not 42601).
UNSUPPORTED_STATEMENTS = frozenset(
    {
        "ALTER",
        "ANALYZE",
        "CALL",
        "CANCEL",
        "CHECKPOINT",
        "CLUSTER",
        "DEALLOCATE",
        "DO",
        "EXECUTE",
        "IMPORT",
        "KILL",
        "LISTEN",
        "LOAD",
        "MERGE",
        "MOVE",
        "NOTIFY",
        "PREPARE",
        "REASSIGN",
        "RECOVER",
        "REFRESH",
        "REINDEX",
        "SECURITY",
        "UNLISTEN",
        "USE",
        "VACUUM",
    }
)

#: Builders that rewrite arguments; these functions parse as `exp.Anonymous` instead.
PG_VERBATIM_FUNCTIONS = (
    "ARRAY_CAT",
    "ARRAY_LENGTH",
    "ARRAY_PREPEND",
    "DIV",
    "GENERATE_SERIES",
    "LPAD",
    "MAKE_INTERVAL",
    "REGEXP_REPLACE",
    "RPAD",
    "TO_CHAR",
    "TO_DATE",
    "TO_TIMESTAMP",
)

_QUERY_STARTS = frozenset({TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.L_PAREN})

_StatementParser = Callable[["PiestreamParser"], ast.Statement]

_STATEMENTS: dict[str, _StatementParser] = {
    "CREATE": lambda p: p._parse_create_statement(),
    "DROP": lambda p: p._parse_drop_statement(),
    "INSERT": lambda p: p._parse_insert_statement(),
    "UPDATE": lambda p: p._parse_update_statement(),
    "DELETE": lambda p: p._parse_delete_statement(),
    "SET": lambda p: p._parse_set_statement(),
    "RESET": lambda p: p._parse_reset_statement(),
    "DISCARD": lambda p: p._parse_discard_statement(),
    "SHOW": lambda p: p._parse_show_statement(),
    "DESCRIBE": lambda p: p._parse_describe_statement(),
    "DESC": lambda p: p._parse_describe_statement(),
    "EXPLAIN": lambda p: p._parse_explain_statement(),
    "FLUSH": lambda p: ast.Flush(),
    "DECLARE": lambda p: p._parse_declare_statement(),
    "FETCH": lambda p: p._parse_fetch_statement(),
    "MOVE": lambda p: p._parse_move_statement(),
    "COPY": lambda p: p._parse_copy_statement(),
    "CLOSE": lambda p: p._parse_close_statement(),
    "ALTER": lambda p: p._parse_alter_statement(),
    "TRUNCATE": lambda p: p._parse_truncate_statement(),
    "LOCK": lambda p: p._parse_lock_statement(),
    "COMMENT": lambda p: p._parse_comment_statement(),
    "BEGIN": lambda p: p._parse_begin_statement(),
    "START": lambda p: p._parse_start_statement(),
    "COMMIT": lambda p: p._parse_commit_statement(),
    "END": lambda p: p._parse_commit_statement(),
    "ROLLBACK": lambda p: p._parse_rollback_statement(),
    "ABORT": lambda p: p._parse_rollback_statement(),
    "SAVEPOINT": lambda p: p._parse_savepoint_statement(),
    "RELEASE": lambda p: p._parse_release_statement(),
    "GRANT": lambda p: p._parse_grant_statement(revoke=False),
    "REVOKE": lambda p: p._parse_grant_statement(revoke=True),
}


class PiestreamParser(DdlParser, DmlParser, UtilityParser, ParserBase):
    """Parses one statement's tokens into an `ast.Statement`."""

    FUNCTIONS: ClassVar[dict[str, Callable]] = {
        k: v for k, v in ParserBase.FUNCTIONS.items() if k not in PG_VERBATIM_FUNCTIONS
    }

    # PostgreSQL has no lambdas: `f(x -> 'k')` is jsonb's `->` on a column x, not a lambda
    LAMBDAS: ClassVar[dict[TokenType, Callable]] = {
        k: v for k, v in ParserBase.LAMBDAS.items() if k != TokenType.ARROW
    }

    JSON_OPERATORS: ClassVar[dict[TokenType, Callable]] = {
        **ParserBase.JSON_OPERATORS,
        TokenType.ARROW: lambda self, this, key: self.expression(exp.JSONExtract(this=this, expression=key)),
        TokenType.DARROW: lambda self, this, key: self.expression(
            exp.JSONExtractScalar(this=this, expression=key)
        ),
    }

    _session_gap: exp.Expr | None = None

    def _parse_partition_and_order(self) -> tuple[list[exp.Expr], exp.Expr | None]:
        """... then RisingWave's ``SESSION WITH GAP <expr>``, kept for `_parse_window`."""
        out = super()._parse_partition_and_order()
        if self._match_text_seq("SESSION", "WITH", "GAP"):
            self._session_gap = self._parse_bitwise()
        return out

    def _parse_window(self, this: exp.Expr | None, alias: bool = False) -> exp.Expr | None:
        outer, self._session_gap = self._session_gap, None
        window = super()._parse_window(this, alias)
        gap, self._session_gap = self._session_gap, outer
        if gap is not None and isinstance(window, exp.Window):
            window.set("spec", exp.WindowSpec(kind="SESSION", start=gap))
        return window

    def parse_tokens(self, tokens: list[Token], sql: str) -> ast.Statement:
        """Parse the tokens of exactly one statement (no ``;``) taken from `sql`."""
        self.reset()
        self.sql = sql
        self._chunks = [tokens]
        self._chunk_index = 0
        self._advance_chunk()
        statement = self.parse_statement_body()
        if self._curr:
            self._fail("Unexpected token")
        return statement

    def parse_statement_body(self) -> ast.Statement:
        first = self._curr
        if not first:
            self._fail("Expecting a statement")
        if first.token_type in _QUERY_STARTS or (
            first.token_type == TokenType.TABLE and self._is_table_query()
        ):
            query, _ = self._parse_query_with_text()
            return ast.Query(query)
        # Dispatch on the word as written, so that "flush" (quoted) or $$FLUSH$$ are no statements.
        word = self._find_sql(first, first).upper()
        parse = _STATEMENTS.get(word)
        if parse is not None:
            self._advance()
            return parse(self)
        if word in UNSUPPORTED_STATEMENTS:
            if word == "ALTER" and self._next:
                word += " " + self._find_sql(self._next, self._next).upper()
            raise self._unsupported(word, first)
        self._fail("Expecting a statement")


class _PgTokenizerCore(TokenizerCore):
    """sqlglot's tokenizer with PostgreSQL's rule that a dollar-quote tag never starts with a digit."""

    __slots__ = ()

    def _scan_string(self, start: str) -> bool:
        if start == "$" and self._peek.isdigit():
            # "$" then digits: a parameter, tokenized as sqlglot does when no tag follows
            self._add(self.heredoc_string_alternative)
            return True
        return super()._scan_string(start)


class Piestream(Postgres):
    """sqlglot dialect for piestream's SQL (PostgreSQL with RisingWave's extensions)."""

    INDEX_OFFSET = 0

    class Tokenizer(Postgres.Tokenizer):
        COMMANDS: ClassVar[set[TokenType]] = set()
        KEYWORDS: ClassVar[dict[str, TokenType]] = {
            k: v for k, v in Postgres.Tokenizer.KEYWORDS.items() if v != TokenType.COMMAND
        }

        def _init_core(self) -> TokenizerCore:
            core = super()._init_core()
            # sqlglot builds its core itself; same slots, one method more (pure-Python core)
            core.__class__ = _PgTokenizerCore
            return core

    Parser = PiestreamParser

    class Generator(PostgresGenerator):
        def windowspec_sql(self, expression: exp.WindowSpec) -> str:
            """RisingWave's session frame reads back as written (`_parse_window`)."""
            if str(expression.args.get("kind") or "").upper() == "SESSION":
                return f"SESSION WITH GAP {self.sql(expression, 'start')}"
            return super().windowspec_sql(expression)
