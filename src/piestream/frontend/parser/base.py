"""The parser's shared layer: sqlglot's PostgreSQL parser plus the helpers every statement uses.

Statement parsers (DDL, DML, utility) build on this: names, WITH (...) options, embedded queries
with their text, and errors that know their token. The few query-level hooks that change
sqlglot's behaviour live here too, because embedded queries and top-level queries share them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import NoReturn

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.parser import SENTINEL_NONE
from sqlglot.parsers.postgres import PostgresParser
from sqlglot.tokens import Token, TokenType

from piestream.common.errors import FeatureNotSupported, SyntaxError_
from piestream.frontend.parser import ast
from piestream.frontend.parser.errors import TokenFailure
from piestream.frontend.parser.names import ObjectName, fold

#: Node types a query can parse into.
QUERY_TYPES: tuple[type[exp.Expression], ...] = (
    exp.Select,
    exp.Union,
    exp.Intersect,
    exp.Except,
    exp.Values,
    exp.Subquery,
)

#: Meta key of a function node: the function's name as the user wrote it (folded).
WRITTEN_NAME = "written_name"

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_STRING_TOKENS = frozenset(
    {TokenType.STRING, TokenType.BYTE_STRING, TokenType.HEREDOC_STRING, TokenType.NATIONAL_STRING}
)


class ParserBase(PostgresParser):
    """PostgreSQL parsing with piestream's error reporting and statement-building helpers."""

    # -- errors -----------------------------------------------------------------------------------
    def raise_error(self, message: str, token: Token = SENTINEL_NONE) -> None:
        """Fail, remembering the token to blame (none when the statement ran out of tokens)."""
        blamed = token or self._curr or None
        raise TokenFailure(message, blamed)

    def _fail(self, message: str, token: Token | None = None) -> NoReturn:
        """A syntax error at `token` (default: the current token, or the end of the statement)."""
        self.raise_error(message, token or SENTINEL_NONE)
        raise AssertionError("raise_error always raises")

    def _unsupported(self, what: str, token: Token) -> FeatureNotSupported:
        """A FeatureNotSupported for valid syntax piestream does not implement, at `token`."""
        return FeatureNotSupported(f"{what} is not supported", position=token.start + 1)

    def _expect(self, *words: str) -> None:
        """Consume the keyword sequence `words` or fail at the current token."""
        if not self._match_text_seq(*words):
            self._fail(f"Expecting {' '.join(words)}")

    # -- names --------------------------------------------------------------------------------------
    def _parse_name_part(self) -> str:
        """One identifier, normalized: quoted verbatim, unquoted folded to lower case."""
        tok = self._curr
        if tok.token_type == TokenType.IDENTIFIER:
            self._advance()
            return tok.text
        if tok and tok.token_type in self.ID_VAR_TOKENS and _WORD.fullmatch(tok.text):
            self._advance()
            return fold(tok.text)
        self._fail("Expecting a name")

    def _parse_object_name(self) -> ObjectName:
        """A possibly schema- (and database-) qualified object name."""
        start = self._curr
        parts = [self._parse_name_part()]
        while self._match(TokenType.DOT):
            parts.append(self._parse_name_part())
        if len(parts) > 3:
            raise SyntaxError_(
                f"improper qualified name (too many dotted names): {'.'.join(parts)}",
                position=start.start + 1,
            )
        return ObjectName.of(parts)

    def _parse_name_list(self) -> list[str]:
        """``(a, b, ...)``."""
        self._match_l_paren()
        names = [self._parse_name_part()]
        while self._match(TokenType.COMMA):
            names.append(self._parse_name_part())
        self._match_r_paren()
        return names

    def _parse_word(self) -> str:
        """Any single word (keywords included), folded; for FORMAT / ENCODE / option names."""
        tok = self._curr
        if tok.token_type == TokenType.IDENTIFIER:
            self._advance()
            return tok.text
        if tok and tok.token_type not in _STRING_TOKENS and _WORD.fullmatch(tok.text):
            self._advance()
            return fold(tok.text)
        self._fail("Expecting a word")

    # -- WITH (key = value, ...) --------------------------------------------------------------------
    def _parse_options(self) -> dict[str, str]:
        """``(key = value, ...)`` with dotted keys (``nexmark.split.num``) and literal values.

        Values are kept as text: strings unquoted, numbers as written, words folded.
        """
        self._match_l_paren()
        options: dict[str, str] = {}
        while True:
            key_token = self._curr
            key = self._parse_word()
            while self._match(TokenType.DOT):
                key += "." + self._parse_word()
            if not self._match(TokenType.EQ):
                self._fail("Expecting =")
            value = self._parse_option_value()
            if key in options:
                raise SyntaxError_(f'option "{key}" specified more than once', position=key_token.start + 1)
            options[key] = value
            if not self._match(TokenType.COMMA):
                break
        self._match_r_paren()
        return options

    def _parse_option_value(self) -> str:
        tok = self._curr
        if tok.token_type in _STRING_TOKENS or tok.token_type == TokenType.NUMBER:
            self._advance()
            return tok.text
        if tok.token_type in (TokenType.DASH, TokenType.PLUS) and self._next.token_type == TokenType.NUMBER:
            self._advance(2)
            return ("-" if tok.token_type == TokenType.DASH else "") + self._prev.text
        return self._parse_word()

    # -- embedded queries ---------------------------------------------------------------------------
    def _parse_query_with_text(self, *, emit_allowed: bool = False) -> tuple[exp.Expression, str]:
        """A query (SELECT, VALUES, set operation, WITH ...) and its text as written. An
        ``EMIT ON WINDOW CLOSE`` after it is left to the caller if `emit_allowed` (CREATE
        MATERIALIZED VIEW reads it), else refused."""
        start = self._curr
        if not start:
            self._fail("Expecting a query")
        query = self._parse_ddl_select()
        if isinstance(query, (exp.Insert, exp.Update, exp.Delete)):
            raise self._unsupported("WITH on INSERT, UPDATE or DELETE", start)
        if not isinstance(query, QUERY_TYPES):
            self._fail("Expecting a query", start)
        while isinstance(query, exp.Subquery) and query.is_wrapper:
            inner = query.this
            query = inner.pop() if isinstance(inner, exp.Expression) else query
        end = self._prev
        if not emit_allowed and self._match_text_seq("EMIT", "ON", "WINDOW", "CLOSE", advance=False):
            raise self._unsupported("EMIT ON WINDOW CLOSE", self._curr)
        return self.normalized(query), self._find_sql(start, end)

    def normalized(self, node: exp.Expression) -> exp.Expression:
        """`node` with unquoted identifiers folded to lower case (PostgreSQL's rule)."""
        result = normalize_identifiers(node, dialect=self.dialect)
        assert isinstance(result, exp.Expression)
        return result

    def _parse_required(self, parsed: exp.Expr | None, what: str) -> exp.Expression:
        """`parsed`, normalized, or a syntax error at the current token."""
        if not isinstance(parsed, exp.Expression):
            self._fail(f"Expecting {what}")
        return self.normalized(parsed)

    # -- hooks into sqlglot's query parsing ---------------------------------------------------------
    def _at_emit_clause(self) -> bool:
        return self._curr.text.upper() == "EMIT" and self._next.token_type == TokenType.ON

    def _parse_alias(self, this: exp.Expr | None, explicit: bool = False) -> exp.Expr | None:
        # A bare `*` takes no alias in PostgreSQL (so `SELECT * FORM t` fails at FORM), and
        # `EMIT ON WINDOW CLOSE` after a select list is a clause, not an alias named EMIT.
        if isinstance(this, exp.Star) or self._at_emit_clause():
            return this
        return super()._parse_alias(this, explicit)

    def _parse_table_alias(self, alias_tokens: Collection[TokenType] | None = None) -> exp.TableAlias | None:
        if self._at_emit_clause():
            return None
        return super()._parse_table_alias(alias_tokens)

    def _parse_group(self, skip_group_by_token: bool = False) -> exp.Group | None:
        # sqlglot accepts a GROUP BY with nothing after it; PostgreSQL does not.
        group = super()._parse_group(skip_group_by_token)
        if group is not None and not any(
            group.args.get(k) for k in ("expressions", "grouping_sets", "rollup", "cube")
        ):
            self._fail("Expecting a grouping expression")
        return group

    def _parse_function_call(
        self,
        functions: dict[str, Callable] | None = None,
        anonymous: bool = False,
        optional_parens: bool = True,
        any_token: bool = False,
    ) -> exp.Expr | None:
        # sqlglot turns a call into its own node (string_agg -> GroupConcat, unnest -> Explode);
        # the name as written goes along (meta WRITTEN_NAME), for column names and messages.
        token = self._curr
        result = super()._parse_function_call(functions, anonymous, optional_parens, any_token)
        node = result
        while isinstance(node, exp.Window | exp.Filter):
            node = node.this
        if isinstance(node, exp.Expression) and token is not None and WRITTEN_NAME not in node.meta:
            quoted = token.token_type == TokenType.IDENTIFIER
            node.meta[WRITTEN_NAME] = token.text if quoted else fold(token.text)
        return result

    def _parse_table_hints(self) -> list[exp.Expr] | None:
        # PostgreSQL has no table hints; `FROM t WITH (...)` in CREATE SINK ... AS SELECT is the
        # sink's options.
        return None

    # -- dispatch (provided by the concrete parser) -------------------------------------------------
    def parse_statement_body(self) -> ast.Statement:
        """Parse one statement starting at the current token."""
        raise NotImplementedError
