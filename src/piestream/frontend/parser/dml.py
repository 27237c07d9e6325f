"""INSERT, UPDATE and DELETE in PostgreSQL's basic forms.

    INSERT INTO table [(cols)] {VALUES (...), ... | query} [RETURNING exprs]
    INSERT INTO table DEFAULT VALUES
    UPDATE table [[AS] alias] SET col = expr, ... [WHERE cond] [RETURNING exprs]
    DELETE FROM table [[AS] alias] [WHERE cond] [RETURNING exprs]

Written on sqlglot's expression parsers rather than its INSERT/UPDATE/DELETE parsers, which
accept every dialect's extensions (INSERT OVERWRITE, UPDATE ... FROM, ...) that piestream would
then have to reject one by one; here anything else is a syntax error at its first token.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from piestream.frontend.parser import ast
from piestream.frontend.parser.base import ParserBase

_QUERY_STARTS = frozenset({TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.L_PAREN})


class DmlParser(ParserBase):
    """INSERT / UPDATE / DELETE (the leading keyword already consumed)."""

    def _parse_insert_statement(self) -> ast.Insert:
        self._expect("INTO")
        table = self._parse_object_name()
        columns: list[str] | None = None
        if self._match(TokenType.L_PAREN, advance=False) and self._next.token_type not in _QUERY_STARTS:
            columns = self._parse_name_list()
        if columns is None and self._match_text_seq("DEFAULT", "VALUES"):
            # one row of every column's DEFAULT: an empty VALUES row (not otherwise parseable)
            source: exp.Expression = exp.Values(expressions=[exp.Tuple(expressions=[])])
        else:
            source, _ = self._parse_query_with_text()
        if self._match_text_seq("ON", "CONFLICT", advance=False):
            raise self._unsupported("INSERT ... ON CONFLICT", self._curr)
        return ast.Insert(table=table, columns=columns, source=source, returning=self._parse_returning_list())

    def _parse_update_statement(self) -> ast.Update:
        table = self._parse_object_name()
        alias = self._parse_dml_alias()
        self._expect("SET")
        assignments = [self._parse_assignment_item()]
        while self._match(TokenType.COMMA):
            assignments.append(self._parse_assignment_item())
        if self._match(TokenType.FROM):
            raise self._unsupported("UPDATE ... FROM", self._prev)
        where = self._parse_where_condition()
        return ast.Update(
            table=table,
            assignments=assignments,
            where=where,
            returning=self._parse_returning_list(),
            alias=alias,
        )

    def _parse_delete_statement(self) -> ast.Delete:
        self._expect("FROM")
        table = self._parse_object_name()
        alias = self._parse_dml_alias()
        if self._match(TokenType.USING):
            raise self._unsupported("DELETE ... USING", self._prev)
        where = self._parse_where_condition()
        return ast.Delete(table=table, where=where, returning=self._parse_returning_list(), alias=alias)

    # -- pieces -------------------------------------------------------------------------------------
    def _parse_dml_alias(self) -> str | None:
        if self._match(TokenType.ALIAS) or self._curr.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
            return self._parse_name_part()
        return None

    def _parse_assignment_item(self) -> ast.Assignment:
        if self._match(TokenType.L_PAREN, advance=False):
            raise self._unsupported("multiple-column UPDATE", self._curr)
        column = self._parse_name_part()
        if self._match(TokenType.DOT) or self._match(TokenType.L_BRACKET):
            raise self._unsupported("UPDATE of a field or element", self._prev)
        if not self._match(TokenType.EQ):
            self._fail("Expecting =")
        if self._match(TokenType.DEFAULT):  # the column's DEFAULT (dml.update substitutes it)
            return ast.Assignment(column, exp.var("DEFAULT"))
        return ast.Assignment(column, self._parse_required(self._parse_disjunction(), "an expression"))

    def _parse_where_condition(self) -> exp.Expression | None:
        if not self._match(TokenType.WHERE):
            return None
        if self._match_text_seq("CURRENT", "OF"):
            raise self._unsupported("WHERE CURRENT OF", self._prev)
        return self._parse_required(self._parse_disjunction(), "a condition")

    def _parse_returning_list(self) -> list[exp.Expression]:
        if not self._match(TokenType.RETURNING):
            return []
        items = self._parse_csv(self._parse_expression)
        return [self.normalized(e) for e in items if isinstance(e, exp.Expression)]
