"""CREATE and DROP: PostgreSQL's forms plus RisingWave's streaming extensions.

Grammar accepted (clauses after the column list in any order, each at most once):

    CREATE TABLE [IF NOT EXISTS] name [( column_def | PRIMARY KEY (cols) | WATERMARK FOR col AS expr , ...)]
        [APPEND ONLY] [ON CONFLICT {DO NOTHING | DO UPDATE FULL | DO UPDATE IF NOT NULL}]
        [WITH (key = value, ...)] [FORMAT f ENCODE e [(options)] | ROW FORMAT f] [AS query]
    CREATE SOURCE [IF NOT EXISTS] name [(...)] WITH (...) [FORMAT f ENCODE e [(options)] | ROW FORMAT f]
    CREATE MATERIALIZED VIEW [IF NOT EXISTS] name [(cols)] [WITH (...)] AS query
    CREATE [OR REPLACE] VIEW [IF NOT EXISTS] name [(cols)] AS query
    CREATE INDEX [IF NOT EXISTS] name ON table (col [ASC | DESC], ...)
        [INCLUDE (cols)] [DISTRIBUTED BY (cols)]
    CREATE [OR REPLACE] FUNCTION ... (see `function_syntax`)
    CREATE SINK [IF NOT EXISTS] name [INTO table] {FROM relation | AS query} [WITH (...)] [FORMAT ...]
    DROP {TABLE | MATERIALIZED VIEW | VIEW | INDEX | SOURCE | SINK} [IF EXISTS] name, ...
        [CASCADE | RESTRICT]

    column_def: name [type] [NOT NULL | NULL | PRIMARY KEY | DEFAULT expr | AS expr
                            | GENERATED ALWAYS AS (expr) STORED | CONSTRAINT name] ...
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from piestream.common.errors import PiestreamError
from piestream.frontend.parser import ast
from piestream.frontend.parser.function_syntax import FunctionParser
from piestream.frontend.parser.names import identifier_name
from piestream.frontend.parser.role_syntax import RoleParser
from piestream.frontend.parser.type_names import convert_type

#: Objects PostgreSQL / RisingWave can CREATE or DROP that piestream does not have.
UNSUPPORTED_OBJECTS = frozenset(
    {
        "AGGREGATE",
        "CAST",
        "COLLATION",
        "CONNECTION",
        "CONVERSION",
        "DATABASE",
        "DOMAIN",
        "EVENT",
        "EXTENSION",
        "FOREIGN",
        "GROUP",
        "LANGUAGE",
        "OPERATOR",
        "POLICY",
        "PROCEDURE",
        "PUBLICATION",
        "ROLE",
        "RULE",
        "SECRET",
        "SEQUENCE",
        "SERVER",
        "STATISTICS",
        "TABLESPACE",
        "TEXT",
        "TRANSFORM",
        "TRIGGER",
        "TYPE",
        "USER",
    }
)

_DROP_KINDS: tuple[tuple[tuple[str, ...], ast.ObjectKind], ...] = (
    (("TABLE",), "table"),
    (("MATERIALIZED", "VIEW"), "materialized view"),
    (("VIEW",), "view"),
    (("INDEX",), "index"),
    (("SOURCE",), "source"),
    (("SINK",), "sink"),
    (("SUBSCRIPTION",), "subscription"),
)

_UNSUPPORTED_TABLE_CONSTRAINTS = frozenset({"UNIQUE", "CHECK", "FOREIGN", "FOREIGN KEY", "EXCLUDE", "LIKE"})
_UNSUPPORTED_COLUMN_CONSTRAINTS = frozenset({"UNIQUE", "CHECK", "REFERENCES", "COLLATE", "GENERATED"})


class InvalidTableDefinition(PiestreamError):
    """42P16 invalid_table_definition (e.g. two primary keys)."""

    sqlstate = "42P16"


@dataclass
class _TableElements:
    """What a parenthesized column list declares."""

    columns: list[ast.ColumnDef] = field(default_factory=list)
    primary_key: list[str] = field(default_factory=list)
    watermarks: list[ast.Watermark] = field(default_factory=list)


@dataclass
class _Clauses:
    """The clauses after a column list (WITH, FORMAT, APPEND ONLY, ...)."""

    append_only: bool = False
    on_conflict: ast.OnConflict | None = None
    with_options: dict[str, str] = field(default_factory=dict)
    format_encode: ast.FormatEncode | None = None
    row_format: str | None = None
    includes: list[ast.Include] = field(default_factory=list)
    from_source: str | None = None
    from_table: str | None = None


class DdlParser(FunctionParser, RoleParser):
    """CREATE ... / DROP ... statements (the CREATE or DROP keyword already consumed)."""

    # -- CREATE -------------------------------------------------------------------------------------
    def _parse_create_statement(self) -> ast.Statement:
        create = self._prev
        or_replace = self._match_text_seq("OR", "REPLACE")
        if self._match_texts(("TEMP", "TEMPORARY")):
            temp = self._prev
            if self._match_text_seq("TABLE"):
                if or_replace:
                    raise self._unsupported("CREATE OR REPLACE TABLE", create)
                return replace(self._parse_create_table(), temporary=True)
            if self._match_text_seq("VIEW"):
                return replace(self._parse_create_view(or_replace), temporary=True)
            raise self._unsupported(f"CREATE {temp.text.upper()} {self._curr.text.upper()}".strip(), create)
        if self._match_texts(("UNLOGGED",)):
            raise self._unsupported(f"CREATE {self._prev.text.upper()}", create)
        if self._match_text_seq("MATERIALIZED", "VIEW"):
            if or_replace:
                raise self._unsupported("CREATE OR REPLACE MATERIALIZED VIEW", create)
            return self._parse_create_mv()
        if self._match_text_seq("VIEW"):
            return self._parse_create_view(or_replace)
        if self._match(TokenType.FUNCTION):
            return self._parse_create_function(or_replace)
        what = self._curr.text.upper() if self._curr else ""
        if or_replace and what:
            raise self._unsupported(f"CREATE OR REPLACE {what}", create)
        if self._match_text_seq("USER"):
            return self._parse_create_role(is_user=True)
        if self._match_text_seq("ROLE"):
            return self._parse_create_role(is_user=False)
        if self._match_text_seq("TABLE"):
            return self._parse_create_table()
        if self._match_text_seq("SOURCE"):
            return self._parse_create_source()
        if self._match_text_seq("SINK"):
            return self._parse_create_sink()
        if self._match_text_seq("SUBSCRIPTION"):
            return self._parse_create_subscription()
        if self._match_text_seq("INDEX"):
            return self._parse_create_index()
        if self._match_text_seq("SCHEMA"):
            return self._parse_create_schema()
        if what == "UNIQUE" and self._next.text.upper() == "INDEX":
            raise self._unsupported("CREATE UNIQUE INDEX", create)
        if what in UNSUPPORTED_OBJECTS:
            raise self._unsupported(f"CREATE {what}", create)
        self._fail("Expecting an object kind")

    def _parse_create_schema(self) -> ast.CreateSchema:
        """``CREATE SCHEMA [IF NOT EXISTS] name`` (AUTHORIZATION and schema elements: 0A000)."""
        if_not_exists = self._parse_if_not_exists()
        if self._match_text_seq("AUTHORIZATION", advance=False):
            raise self._unsupported("CREATE SCHEMA ... AUTHORIZATION", self._curr)
        name = self._parse_name_part()
        if self._curr and self._curr.token_type != TokenType.SEMICOLON:
            raise self._unsupported(f"CREATE SCHEMA ... {self._curr.text.upper()}", self._curr)
        return ast.CreateSchema(name, if_not_exists)

    def _parse_if_not_exists(self) -> bool:
        return self._match_text_seq("IF", "NOT", "EXISTS")

    def _parse_create_table(self) -> ast.CreateTable:
        if_not_exists = self._parse_if_not_exists()
        name = self._parse_object_name()
        elements = self._parse_table_elements() if self._match(TokenType.L_PAREN, advance=False) else None
        clauses = self._parse_clauses(table=True)
        as_query: exp.Expression | None = None
        as_text: str | None = None
        if self._match(TokenType.ALIAS):
            as_query, as_text = self._parse_query_with_text()
        elif elements is None and not clauses.with_options:
            self._fail("Expecting (")
        if clauses.from_source is not None and clauses.with_options:
            self._fail("CREATE TABLE ... FROM a source takes its options from the source, not WITH")
        elements = elements or _TableElements()
        return ast.CreateTable(
            name=name,
            columns=elements.columns,
            primary_key=elements.primary_key,
            append_only=clauses.append_only,
            on_conflict=clauses.on_conflict,
            with_options=clauses.with_options,
            as_query=as_query,
            as_query_text=as_text,
            if_not_exists=if_not_exists,
            watermarks=elements.watermarks,
            format_encode=clauses.format_encode,
            row_format=clauses.row_format,
            includes=clauses.includes,
            from_source=clauses.from_source,
            from_table=clauses.from_table,
        )

    def _parse_create_source(self) -> ast.CreateSource:
        if_not_exists = self._parse_if_not_exists()
        name = self._parse_object_name()
        elements = self._parse_table_elements() if self._match(TokenType.L_PAREN, advance=False) else None
        clauses = self._parse_clauses(table=False)
        elements = elements or _TableElements()
        return ast.CreateSource(
            name=name,
            columns=elements.columns,
            with_options=clauses.with_options,
            if_not_exists=if_not_exists,
            watermarks=elements.watermarks,
            primary_key=elements.primary_key,
            format_encode=clauses.format_encode,
            row_format=clauses.row_format,
            includes=clauses.includes,
        )

    def _parse_create_mv(self) -> ast.CreateMaterializedView:
        if_not_exists = self._parse_if_not_exists()
        name = self._parse_object_name()
        columns = self._parse_name_list() if self._match(TokenType.L_PAREN, advance=False) else None
        options = self._parse_options() if self._match(TokenType.WITH) else {}
        self._expect("AS")
        query, text = self._parse_query_with_text(emit_allowed=True)
        # RisingWave's emit mode: each window's row once, when the watermark passes it
        eowc = self._match_text_seq("EMIT", "ON", "WINDOW", "CLOSE")
        return ast.CreateMaterializedView(
            name=name,
            query=query,
            sql_text=text,
            if_not_exists=if_not_exists,
            columns=columns,
            with_options=options,
            emit_on_window_close=bool(eowc),
        )

    def _parse_create_view(self, or_replace: bool) -> ast.CreateView:
        if_not_exists = self._parse_if_not_exists()
        name = self._parse_object_name()
        columns = self._parse_name_list() if self._match(TokenType.L_PAREN, advance=False) else None
        self._expect("AS")
        query, text = self._parse_query_with_text()
        return ast.CreateView(
            name=name,
            columns=columns,
            query=query,
            sql_text=text,
            or_replace=or_replace,
            if_not_exists=if_not_exists,
        )

    def _parse_create_index(self) -> ast.CreateIndex:
        if_not_exists = self._parse_if_not_exists()
        name = self._parse_name_part()
        self._expect("ON")
        table = self._parse_object_name()
        if self._match(TokenType.USING):
            # the one access method piestream's indexes are: sorted by their keys (pg_dump writes it)
            method = self._curr
            if method is None or method.text.lower() != "btree":
                raise self._unsupported("CREATE INDEX ... USING other than btree", method or self._prev)
            self._advance()
        self._match_l_paren()
        columns = [self._parse_index_column()]
        while self._match(TokenType.COMMA):
            columns.append(self._parse_index_column())
        self._match_r_paren()
        include = self._parse_name_list() if self._match_text_seq("INCLUDE") else []
        distributed_by = self._parse_name_list() if self._match_text_seq("DISTRIBUTED", "BY") else []
        return ast.CreateIndex(
            name=name,
            table=table,
            columns=columns,
            include=include,
            distributed_by=distributed_by,
            if_not_exists=if_not_exists,
        )

    def _parse_index_column(self) -> ast.IndexColumn:
        start = self._curr
        ordered = self._parse_ordered()
        target = ordered.this if isinstance(ordered, exp.Ordered) else ordered
        if not isinstance(target, exp.Column) or target.table:
            if target is None:
                self._fail("Expecting a column", start)
            raise self._unsupported("index on an expression", start)
        name = identifier_name(target)
        return ast.IndexColumn(name, bool(isinstance(ordered, exp.Ordered) and ordered.args.get("desc")))

    def _parse_create_sink(self) -> ast.CreateSink:
        if_not_exists = self._parse_if_not_exists()
        name = self._parse_object_name()
        into = self._parse_object_name() if self._match(TokenType.INTO) else None
        from_relation: str | None = None
        query: exp.Expression | None = None
        text: str | None = None
        if self._match(TokenType.FROM):
            from_relation = self._parse_object_name()
        elif self._match(TokenType.ALIAS):
            query, text = self._parse_query_with_text(emit_allowed=True)
        else:
            self._fail("Expecting FROM or AS")
        # RisingWave parses the emit mode after either form (`FROM x` plans as `SELECT * FROM x`)
        eowc = self._match_text_seq("EMIT", "ON", "WINDOW", "CLOSE")
        clauses = self._parse_clauses(table=False)
        return ast.CreateSink(
            name=name,
            from_relation=from_relation,
            query=query,
            with_options=clauses.with_options,
            if_not_exists=if_not_exists,
            sql_text=text,
            into_table=into,
            format_encode=clauses.format_encode,
            emit_on_window_close=bool(eowc),
        )

    def _parse_create_subscription(self) -> ast.CreateSubscription:
        if_not_exists = self._parse_if_not_exists()
        name = self._parse_object_name()
        self._expect("FROM")
        from_relation = self._parse_object_name()
        options = self._parse_options() if self._match_text_seq("WITH") else {}
        return ast.CreateSubscription(name, from_relation, options, if_not_exists)

    # -- column lists -------------------------------------------------------------------------------
    def _parse_table_elements(self) -> _TableElements:
        elements = _TableElements()
        self._match_l_paren()
        if self._match(TokenType.R_PAREN):
            return elements
        while True:
            self._parse_table_element(elements)
            # a trailing comma before ")" is accepted, as RisingWave does
            if not self._match(TokenType.COMMA) or self._match(TokenType.R_PAREN, advance=False):
                break
        self._match_r_paren()
        return elements

    def _parse_table_element(self, elements: _TableElements) -> None:
        start = self._curr
        if self._match_text_seq("WATERMARK", "FOR"):
            target = self._parse_name_part()
            self._expect("AS")
            expr = self._parse_required(self._parse_disjunction(), "an expression")
            elements.watermarks.append(ast.Watermark(target, expr))
            return
        if self._match(TokenType.CONSTRAINT):
            self._parse_name_part()
            if not self._match(TokenType.PRIMARY_KEY, advance=False):
                raise self._unsupported(f"{self._curr.text.upper()} constraint", self._curr)
        if self._match(TokenType.PRIMARY_KEY):
            self._set_primary_key(elements, self._parse_name_list(), start)
            return
        if start.text.upper() in _UNSUPPORTED_TABLE_CONSTRAINTS:
            raise self._unsupported(f"{start.text.upper()} constraint", start)
        column = self._parse_column_definition()
        elements.columns.append(column)
        if column.primary_key:
            self._set_primary_key(elements, [column.name], start)

    def _set_primary_key(self, elements: _TableElements, columns: list[str], token: Token) -> None:
        if elements.primary_key:
            raise InvalidTableDefinition(
                "multiple primary keys for table are not allowed", position=token.start + 1
            )
        elements.primary_key = columns

    def _parse_column_definition(self) -> ast.ColumnDef:
        name = self._parse_name_part()
        data_type = None
        if not self._match(TokenType.ALIAS, advance=False):
            type_token = self._curr
            node = self._parse_types(check_func=False, schema=True, allow_identifiers=True)
            if not isinstance(node, exp.Expression):
                self._fail("Expecting a type", type_token)
            data_type = convert_type(node, position=type_token.start + 1)
        not_null = primary_key = False
        default: exp.Expression | None = None
        generated: exp.Expression | None = None
        while self._curr:
            if self._match_text_seq("NOT", "NULL"):
                not_null = True
            elif self._match(TokenType.NULL):
                not_null = False
            elif self._match(TokenType.PRIMARY_KEY):
                primary_key = True
            elif self._match(TokenType.DEFAULT):
                default = self._parse_required(self._parse_bitwise(), "an expression")
            elif self._match(TokenType.ALIAS):
                generated = self._parse_required(self._parse_disjunction(), "an expression")
            elif self._match_text_seq("GENERATED", "ALWAYS", "AS"):
                self._match_l_paren()
                generated = self._parse_required(self._parse_disjunction(), "an expression")
                self._match_r_paren()
                self._expect("STORED")
            elif self._match(TokenType.CONSTRAINT):
                self._parse_name_part()
            elif self._curr.text.upper() in _UNSUPPORTED_COLUMN_CONSTRAINTS:
                raise self._unsupported(f"{self._curr.text.upper()} column constraint", self._curr)
            else:
                break
        if data_type is None and generated is None:
            self._fail("Expecting a type")
        return ast.ColumnDef(name, data_type, not_null, primary_key, default, generated)

    # -- clauses after the column list --------------------------------------------------------------
    def _parse_clauses(self, *, table: bool) -> _Clauses:
        clauses = _Clauses()
        seen: set[str] = set()
        while self._curr:
            token = self._curr
            if table and self._match_text_seq("APPEND", "ONLY"):
                clause = "append"
                clauses.append_only = True
            elif table and self._match_text_seq("ON", "CONFLICT"):
                clause = "conflict"
                clauses.on_conflict = self._parse_conflict_behavior()
            elif table and self._match(TokenType.FROM):
                clause = "from"
                clauses.from_source = self._parse_object_name()
                self._expect("TABLE")
                tok = self._curr
                if tok is None or tok.token_type not in (TokenType.STRING, TokenType.NATIONAL_STRING):
                    self._fail("Expecting the upstream table's name as a string")
                clauses.from_table = self._parse_option_value()
            elif self._match(TokenType.WITH):
                clause = "with"
                clauses.with_options = self._parse_options()
            elif self._match_text_seq("FORMAT"):
                clause = "format"
                clauses.format_encode = self._parse_format_encode()
            elif self._match_text_seq("ROW", "FORMAT"):
                clause = "format"
                clauses.row_format = self._parse_word()
            elif self._match_text_seq("INCLUDE"):
                clauses.includes.append(self._parse_include(token))
                continue  # INCLUDE may repeat
            else:
                break
            if clause in seen:
                self._fail("Duplicate clause", token)
            seen.add(clause)
        return clauses

    def _parse_include(self, token: Token) -> ast.Include:
        kind = self._parse_word()
        if kind not in ("key", "partition", "offset", "timestamp", "header"):
            raise self._unsupported(f"INCLUDE {kind.upper()}", token)
        header = None
        if kind == "header":
            if self._curr is None or self._curr.token_type != TokenType.STRING:
                raise self._unsupported("INCLUDE HEADER without a header name", token)
            header = self._curr.text
            self._advance()
        column = self._parse_name_part() if self._match(TokenType.ALIAS) else None
        return ast.Include(kind, column, header)

    def _parse_conflict_behavior(self) -> ast.OnConflict:
        if self._match_text_seq("DO", "NOTHING") or self._match_text_seq("IGNORE"):
            return "do_nothing"
        if self._match_text_seq("DO", "UPDATE", "FULL") or self._match_text_seq("OVERWRITE"):
            return "do_update_full"
        if self._match_text_seq("DO", "UPDATE", "IF", "NOT", "NULL"):
            return "do_update_if_not_null"
        self._fail("Expecting DO NOTHING, DO UPDATE FULL or DO UPDATE IF NOT NULL")

    def _parse_format_encode(self) -> ast.FormatEncode:
        fmt = self._parse_word()
        self._expect("ENCODE")
        encode = self._parse_word()
        options = self._parse_options() if self._match(TokenType.L_PAREN, advance=False) else {}
        return ast.FormatEncode(fmt, encode, options)

    # -- DROP ---------------------------------------------------------------------------------------
    def _parse_drop_statement(self) -> ast.Drop | ast.DropFunction | ast.DropSchema | ast.DropRole:
        if self._match(TokenType.FUNCTION):
            return self._parse_drop_function()
        if self._match_texts(("USER", "ROLE")):
            return self._parse_drop_role()
        if self._match_text_seq("SCHEMA"):
            if_exists = self._match_text_seq("IF", "EXISTS")
            schemas = [self._parse_name_part()]
            while self._match(TokenType.COMMA):
                schemas.append(self._parse_name_part())
            cascade = self._match_text_seq("CASCADE")
            if not cascade:
                self._match_text_seq("RESTRICT")
            return ast.DropSchema(schemas, if_exists, cascade)
        kind = self._parse_drop_kind()
        if_exists = self._match_text_seq("IF", "EXISTS")
        names = [self._parse_object_name()]
        while self._match(TokenType.COMMA):
            names.append(self._parse_object_name())
        cascade = False
        if self._match_text_seq("CASCADE"):
            cascade = True
        else:
            self._match_text_seq("RESTRICT")
        return ast.Drop(kind=kind, names=names, if_exists=if_exists, cascade=cascade)

    def _parse_drop_kind(self) -> ast.ObjectKind:
        drop = self._prev
        for words, kind in _DROP_KINDS:
            if self._match_text_seq(*words):
                return kind
        what = self._curr.text.upper()
        if what in UNSUPPORTED_OBJECTS:
            raise self._unsupported(f"DROP {what}", drop)
        self._fail("Expecting an object kind")
