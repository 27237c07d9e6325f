"""CREATE FUNCTION and DROP FUNCTION (user-defined scalar functions).

Grammar accepted (the clauses after RETURNS in any order, each at most once):

    CREATE [OR REPLACE] FUNCTION name ( [[argname] type, ...] ) RETURNS type
        { LANGUAGE {sql | python} | AS $$body$$ | RETURN expr | IMMUTABLE | STABLE | VOLATILE
        | STRICT | RETURNS NULL ON NULL INPUT | CALLED ON NULL INPUT | WITH (option = value, ...) }
    DROP FUNCTION [IF EXISTS] name [( [[argname] type, ...] )], ... [CASCADE | RESTRICT]

Argument modes (OUT, INOUT, VARIADIC), argument defaults and set-returning functions (RETURNS
TABLE / SETOF) are valid PostgreSQL that piestream does not implement: 0A000.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from piestream.common.errors import PiestreamError
from piestream.common.types import DataType
from piestream.frontend.parser import ast
from piestream.frontend.parser.base import ParserBase
from piestream.frontend.parser.names import DEFAULT_SCHEMA
from piestream.frontend.parser.type_names import convert_type

_STRINGS = (TokenType.HEREDOC_STRING, TokenType.STRING)
_VOLATILITY = ("IMMUTABLE", "STABLE", "VOLATILE")


class FunctionParser(ParserBase):
    """The FUNCTION statements (the CREATE [OR REPLACE] / DROP keywords already consumed)."""

    def _parse_function_name(self) -> str:
        """A function's name: functions live in public (a name in another schema is 0A000, never
        the function of that name in public)."""
        start = self._curr
        name = self._parse_object_name()
        if name.database is not None or name.schema not in (None, DEFAULT_SCHEMA):
            raise self._unsupported(f"a function in schema {name.schema}", start)
        return str(name)

    def _parse_create_function(self, or_replace: bool) -> ast.CreateFunction:
        name = self._parse_function_name()
        args = self._parse_udf_args()
        self._expect("RETURNS")
        if self._curr and self._curr.text.upper() in ("TABLE", "SETOF"):
            raise self._unsupported(f"RETURNS {self._curr.text.upper()}", self._curr)
        return_type = self._parse_udf_type()
        language: str | None = None
        body: str | None = None
        strict = False
        options: dict[str, str] = {}
        seen: set[str] = set()
        while self._curr:
            token = self._curr
            word = token.text.upper()
            if self._match_text_seq("LANGUAGE"):
                clause, language = "language", self._parse_word().lower()
            elif self._match(TokenType.ALIAS):
                clause = "body"
                if not self._match_set(_STRINGS):
                    self._fail("Expecting a string")
                body = self._prev.text
                if self._match(TokenType.COMMA):
                    raise self._unsupported("a function body of object file and link symbol", token)
            elif self._match_text_seq("RETURN"):
                clause = "body"
                start = self._curr
                self._parse_required(self._parse_disjunction(), "an expression")
                body = "SELECT " + self._find_sql(start, self._prev)
            elif word in _VOLATILITY:
                self._advance()
                clause = "volatility"
            elif self._match_text_seq("STRICT") or self._match_text_seq(
                "RETURNS", "NULL", "ON", "NULL", "INPUT"
            ):
                clause, strict = "null input", True
            elif self._match_text_seq("CALLED", "ON", "NULL", "INPUT"):
                clause, strict = "null input", False
            elif self._match(TokenType.WITH):
                clause, options = "with", self._parse_options()
            elif word in ("SECURITY", "PARALLEL", "COST", "ROWS", "SET", "LEAKPROOF", "SUPPORT", "WINDOW"):
                raise self._unsupported(f"CREATE FUNCTION ... {word}", token)
            else:
                break
            if clause in seen:
                self._fail("conflicting or redundant options", token)
            seen.add(clause)
        if language is None:
            raise PiestreamError("no language specified", sqlstate="42P13")
        if body is None:
            raise PiestreamError("no function body specified", sqlstate="42P13")
        return ast.CreateFunction(
            name=name,
            args=args,
            return_type=return_type,
            language=language,
            body=body,
            or_replace=or_replace,
            strict=strict,
            with_options=options,
        )

    def _parse_udf_args(self) -> list[ast.FunctionArg]:
        self._match_l_paren()
        args: list[ast.FunctionArg] = []
        if self._match(TokenType.R_PAREN):
            return args
        while True:
            token = self._curr
            if token and token.text.upper() in ("OUT", "INOUT", "VARIADIC"):
                raise self._unsupported(f"{token.text.upper()} arguments", token)
            self._match_text_seq("IN")
            name = ""
            following = self._next.token_type if self._next else None
            if following not in (TokenType.COMMA, TokenType.R_PAREN, TokenType.L_BRACKET, TokenType.L_PAREN):
                name = self._parse_name_part()
            args.append(ast.FunctionArg(name, self._parse_udf_type()))
            if self._curr and self._curr.token_type in (TokenType.DEFAULT, TokenType.EQ):
                raise self._unsupported("argument defaults", self._curr)
            if not self._match(TokenType.COMMA):
                break
        self._match_r_paren()
        return args

    def _parse_udf_type(self) -> DataType:
        token = self._curr
        node = self._parse_types(check_func=False, schema=True, allow_identifiers=True)
        if not isinstance(node, exp.Expression):
            self._fail("Expecting a type", token)
        return convert_type(node, position=token.start + 1)

    def _parse_drop_function(self) -> ast.DropFunction:
        if_exists = self._match_text_seq("IF", "EXISTS")
        targets: list[tuple[str, list[DataType] | None]] = []
        while True:
            name = self._parse_function_name()
            types = None
            if self._match(TokenType.L_PAREN, advance=False):
                types = [a.type for a in self._parse_udf_args()]
            targets.append((name, types))
            if not self._match(TokenType.COMMA):
                break
        cascade = bool(self._match_text_seq("CASCADE"))
        if not cascade:
            self._match_text_seq("RESTRICT")
        return ast.DropFunction(targets=targets, if_exists=if_exists, cascade=cascade)
