"""Utility statements: SET / RESET / SHOW / DESCRIBE / EXPLAIN / FLUSH / DISCARD and transactions.

Transaction statements (BEGIN / START TRANSACTION, SET TRANSACTION, COMMIT / END, ROLLBACK /
ABORT, SAVEPOINT, RELEASE, ROLLBACK TO) are what drivers (psql, psycopg, JDBC, SQLAlchemy, pandas)
send around their work; the session runs them.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot.tokens import TokenType

from piestream.frontend.parser import ast
from piestream.frontend.parser.names import ObjectName, fold, quote_ident
from piestream.frontend.parser.role_syntax import RoleParser

_SHOW_KINDS: tuple[tuple[tuple[str, ...], ast.ShowKind], ...] = (
    (("TABLES",), "tables"),
    (("MATERIALIZED", "VIEWS"), "materialized views"),
    (("VIEWS",), "views"),
    (("SOURCES",), "sources"),
    (("SINKS",), "sinks"),
    (("SUBSCRIPTIONS",), "subscriptions"),
    (("INDEXES",), "indexes"),
    (("COLUMNS",), "columns"),
    (("SCHEMAS",), "schemas"),
    (("DATABASES",), "databases"),
    (("PARAMETERS",), "parameters"),
)

_SHOW_CREATE_KINDS: tuple[tuple[tuple[str, ...], ast.ObjectKind], ...] = (
    (("TABLE",), "table"),
    (("MATERIALIZED", "VIEW"), "materialized view"),
    (("VIEW",), "view"),
    (("INDEX",), "index"),
    (("SOURCE",), "source"),
    (("SINK",), "sink"),
    (("SUBSCRIPTION",), "subscription"),
)

#: Multi-word variable names PostgreSQL spells with spaces in SET / SHOW.
_SPECIAL_VARIABLES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("TIME", "ZONE"), "timezone"),
    (("TRANSACTION", "ISOLATION", "LEVEL"), "transaction_isolation"),
)

_ISOLATION_LEVELS = (
    ("SERIALIZABLE",),
    ("REPEATABLE", "READ"),
    ("READ", "COMMITTED"),
    ("READ", "UNCOMMITTED"),
)


class UtilityParser(RoleParser):
    """Session and introspection statements (the leading keyword already consumed)."""

    # -- SET / RESET --------------------------------------------------------------------------------
    def _parse_set_statement(self) -> ast.SetVariable | ast.SetTransaction:
        if self._match_text_seq("TRANSACTION"):
            return ast.SetTransaction(self._parse_transaction_modes())
        local = False
        if self._match_text_seq("LOCAL"):
            local = True
        else:
            self._match_text_seq("SESSION")
        if self._match_text_seq("TIME", "ZONE"):
            value = None if self._match_texts(("DEFAULT", "LOCAL")) else self._parse_set_value()
            return ast.SetVariable("timezone", value, local)
        if self._match_text_seq("TRANSACTION", advance=False) or self._match_text_seq(
            "CHARACTERISTICS", advance=False
        ):
            raise self._unsupported(f"SET {self._curr.text.upper()}", self._curr)
        name = self._parse_variable_name()
        if not (self._match(TokenType.EQ) or self._match_text_seq("TO")):
            self._fail("Expecting TO or =")
        if self._match(TokenType.DEFAULT):
            return ast.SetVariable(name, None, local)
        values = [self._parse_set_value()]
        while self._match(TokenType.COMMA):
            values.append(self._parse_set_value())
        if name == "search_path":  # a list of names: shown (and read back) quoted where needed
            values = [quote_ident(v) for v in values]
        return ast.SetVariable(name, ", ".join(values), local)

    # -- ALTER (only the forms piestream has; the rest is 0A000) ----------------------------------
    def _parse_alter_statement(self) -> ast.Statement:
        alter = self._prev
        if self._match_text_seq("SYSTEM"):
            if not self._match(TokenType.SET):
                word = self._curr.text.upper() if self._curr else ""
                raise self._unsupported(f"ALTER SYSTEM {word}".strip(), alter)
            name = self._parse_variable_name()
            if not (self._match(TokenType.EQ) or self._match_text_seq("TO")):
                self._fail("Expecting TO or =")
            value = None if self._match(TokenType.DEFAULT) else self._parse_set_value()
            return ast.AlterSystem(name, value)
        if self._match_texts(("USER", "ROLE")):
            return self._parse_alter_role()
        if self._match_text_seq("SCHEMA"):
            schema = self._parse_name_part()
            if not self._match_text_seq("OWNER"):
                raise self._unsupported("this form of ALTER SCHEMA", alter)
            return self._parse_owner_to("schema", schema)
        kind = self._parse_alter_kind()
        if kind is None:
            word = self._curr.text.upper() if self._curr else ""
            raise self._unsupported(f"ALTER {word}".strip(), alter)
        if_exists = self._match_text_seq("IF", "EXISTS")
        name = self._parse_object_name()
        if kind == "materialized view" and self._match_text_seq("REBUILD") and not if_exists:
            return ast.RebuildJob("materialized view", name)
        if kind != "index" and not if_exists and self._match_text_seq("OWNER"):
            return self._parse_owner_to(kind, name)
        if self._match_text_seq("RENAME"):
            if self._match_text_seq("TO"):
                return ast.AlterRename(kind, name, self._parse_name_part(), if_exists=if_exists)
            if kind == "table":
                self._match_text_seq("COLUMN")
                column = self._parse_name_part()
                self._expect("TO")
                return ast.AlterRename(kind, name, self._parse_name_part(), column, if_exists)
            raise self._unsupported(f"this form of ALTER {kind.upper()} ... RENAME", alter)
        if kind in ("table", "source") and self._match_text_seq("ADD"):
            self._match_text_seq("COLUMN")
            if self._curr and self._curr.text.upper() in (
                "CONSTRAINT",
                "PRIMARY",
                "UNIQUE",
                "CHECK",
                "FOREIGN",
            ):
                raise self._unsupported(f"ALTER {kind.upper()} ... ADD {self._curr.text.upper()}", alter)
            not_exists = self._match_text_seq("IF", "NOT", "EXISTS")
            first = self._curr
            column = self._parse_column_definition()  # type: ignore[attr-defined]
            text = self._find_sql(first, self._prev) if first is not None else ""
            return ast.AlterAddColumn(kind, name, column, if_exists, not_exists, text)
        if kind == "table" and self._match_text_seq("DROP"):
            if self._curr and self._curr.text.upper() in ("CONSTRAINT",):
                raise self._unsupported("ALTER TABLE ... DROP CONSTRAINT", alter)
            self._match_text_seq("COLUMN")
            column_if_exists = self._match_text_seq("IF", "EXISTS")
            column = self._parse_name_part()
            cascade = bool(self._match_text_seq("CASCADE"))
            if not cascade:
                self._match_text_seq("RESTRICT")
            return ast.AlterDropColumn(name, column, if_exists, column_if_exists, cascade)
        if kind in ("table", "materialized view", "sink", "source") and self._match_text_seq(
            "SET", "PARALLELISM"
        ):
            if if_exists:
                raise self._unsupported(f"ALTER {kind.upper()} IF EXISTS ... SET PARALLELISM", alter)
            if not (self._match(TokenType.EQ) or self._match_text_seq("TO")):
                self._fail("Expecting TO or =")
            value = "default" if self._match(TokenType.DEFAULT) else self._parse_set_value()
            return ast.AlterParallelism(kind, name, value)
        if kind in ("table", "source") and self._match(TokenType.SET):
            setting = self._parse_variable_name()
            if setting.lower() != "source_rate_limit" or if_exists:
                raise self._unsupported(f"ALTER {kind.upper()} ... SET {setting}", alter)
            if not (self._match(TokenType.EQ) or self._match_text_seq("TO")):
                self._fail("Expecting TO or =")
            value = None if self._match(TokenType.DEFAULT) else self._parse_set_value()
            return ast.AlterSourceRateLimit(kind, name, value)
        raise self._unsupported(f"this form of ALTER {kind.upper()}", alter)

    def _parse_alter_kind(self) -> str | None:
        """The object kind after ALTER (the forms with a handler), or None."""
        if self._match_text_seq("MATERIALIZED", "VIEW"):
            return "materialized view"
        if self._match(TokenType.TABLE):
            return "table"
        for word in ("VIEW", "SOURCE", "SINK", "INDEX"):
            if self._match_text_seq(word):
                return word.lower()
        return None

    # -- TRUNCATE, COMMENT ON ------------------------------------------------------------------
    def _parse_lock_statement(self) -> ast.LockTable:
        self._match(TokenType.TABLE)
        self._match_text_seq("ONLY")  # piestream has no table inheritance: ONLY changes nothing
        names = [self._parse_object_name()]
        self._match(TokenType.STAR)
        while self._match(TokenType.COMMA):
            self._match_text_seq("ONLY")
            names.append(self._parse_object_name())
            self._match(TokenType.STAR)
        mode = "ACCESS EXCLUSIVE"
        if self._match(TokenType.IN):
            words = []
            while self._curr and self._curr.text.upper() != "MODE":
                words.append(self._curr.text.upper())
                self._advance()
            if not self._match_text_seq("MODE"):
                self._fail("Expecting MODE")
            mode = " ".join(words)
            if mode not in ast.LOCK_MODES:
                self._fail(f"Expecting a lock mode, got {mode or 'nothing'}")
        nowait = bool(self._match_text_seq("NOWAIT"))
        return ast.LockTable(tuple(names), mode, nowait)

    def _parse_truncate_statement(self) -> ast.Truncate:
        start = self._prev
        self._match(TokenType.TABLE)
        if self._match_text_seq("ONLY"):
            raise self._unsupported("TRUNCATE ONLY", start)
        names = [self._parse_object_name()]
        while self._match(TokenType.COMMA):
            names.append(self._parse_object_name())
        if self._curr and self._curr.text.upper() in ("RESTART", "CONTINUE", "CASCADE"):
            raise self._unsupported(f"TRUNCATE ... {self._curr.text.upper()}", start)
        self._match_text_seq("RESTRICT")
        return ast.Truncate(tuple(names))

    def _parse_comment_statement(self) -> ast.CommentOn:
        start = self._prev
        self._expect("ON")
        if self._match_text_seq("COLUMN"):
            parts = [self._parse_name_part()]
            while self._match(TokenType.DOT):
                parts.append(self._parse_name_part())
            if len(parts) < 2:
                self._fail("column name must be qualified")
            kind, name, column = "column", ObjectName.of(parts[:-1]), parts[-1]
        else:
            found = self._parse_alter_kind()
            if found is None:
                word = self._curr.text.upper() if self._curr else ""
                raise self._unsupported(f"COMMENT ON {word}".strip(), start)
            kind, name, column = found, self._parse_object_name(), None
        self._expect("IS")
        if self._match(TokenType.NULL):
            comment = None
        else:
            tok = self._curr
            if tok is None or tok.token_type not in (TokenType.STRING, TokenType.HEREDOC_STRING):
                self._fail("Expecting a string literal")
            self._advance()
            comment = tok.text
        return ast.CommentOn(kind, name, column, comment)

    def _parse_set_value(self) -> str:
        if self._curr.token_type in (TokenType.TRUE, TokenType.FALSE, TokenType.ON):
            self._advance()
            return self._prev.text.lower()
        return self._parse_option_value()

    def _parse_variable_name(self) -> str:
        # GUC names are case-insensitive, quoted or not; extension variables are dotted.
        name = self._parse_word()
        while self._match(TokenType.DOT):
            name += "." + self._parse_word()
        return name.lower()

    def _parse_reset_statement(self) -> ast.SetVariable | ast.ResetAll:
        if self._match(TokenType.ALL):
            return ast.ResetAll()
        for words, name in _SPECIAL_VARIABLES:
            if self._match_text_seq(*words):
                return ast.SetVariable(name, None)
        return ast.SetVariable(self._parse_variable_name(), None)

    def _parse_discard_statement(self) -> ast.Discard:
        if self._match_texts(("ALL", "PLANS", "SEQUENCES", "TEMP", "TEMPORARY")):
            target = self._prev.text.lower()
            return ast.Discard("temp" if target == "temporary" else target)
        self._fail("Expecting ALL, PLANS, SEQUENCES or TEMP")

    # -- subscription cursors (RisingWave) ----------------------------------------------------------
    def _parse_declare_statement(self) -> ast.DeclareSubscriptionCursor | ast.DeclareCursor:
        name = self._parse_name_part()
        if not self._match_text_seq("SUBSCRIPTION", "CURSOR"):
            return self._parse_query_cursor(name)
        self._expect("FOR")
        sub = self._parse_object_name()
        since = "now"
        if self._match_text_seq("FULL"):
            since = "full"
        elif self._match_text_seq("SINCE"):
            tok = self._curr
            if tok and tok.token_type == TokenType.NUMBER:
                self._advance()
                since = tok.text
            elif self._match_texts(("NOW", "PROCTIME", "BEGIN")):
                since = "begin" if self._prev.text.upper() == "BEGIN" else "now"
                self._match_l_paren()
                self._match_r_paren()
            else:
                self._fail("Expecting a rw_timestamp, now(), proctime() or begin()")
        return ast.DeclareSubscriptionCursor(name, sub, since)

    def _parse_query_cursor(self, name: str) -> ast.DeclareCursor:
        """DECLARE name [BINARY] [ASENSITIVE | INSENSITIVE] [NO SCROLL] CURSOR [WITH[OUT] HOLD] FOR query."""
        binary = False
        while True:
            if self._match_texts(("BINARY",)):
                binary = True
            elif self._match_texts(("INSENSITIVE", "ASENSITIVE")):
                pass  # a cursor reads one snapshot: it is insensitive
            elif self._match_text_seq("NO", "SCROLL"):
                pass
            elif self._curr and self._curr.text.upper() == "SCROLL":
                raise self._unsupported("SCROLL cursors (FETCH BACKWARD)", self._curr)
            else:
                break
        if not self._match_text_seq("CURSOR"):
            self._fail("Expecting CURSOR")
        hold = False
        if self._match_text_seq("WITH", "HOLD"):
            hold = True
        else:
            self._match_text_seq("WITHOUT", "HOLD")
        self._expect("FOR")
        query, _ = self._parse_query_with_text()
        return ast.DeclareCursor(name, query, binary, hold)

    def _parse_move_statement(self) -> ast.Fetch:
        return self._parse_fetch_statement(move=True)

    def _parse_fetch_statement(self, move: bool = False) -> ast.Fetch:
        count = 1
        every = False
        what = "MOVE" if move else "FETCH"
        if not self._match_text_seq("NEXT"):
            self._match_text_seq("FORWARD")
        tok = self._curr
        if tok and tok.token_type == TokenType.NUMBER:
            self._advance()
            count = int(tok.text)
        elif self._match(TokenType.ALL):
            every = True
        elif tok and tok.text.upper() in ("PRIOR", "FIRST", "LAST", "ABSOLUTE", "RELATIVE", "BACKWARD"):
            raise self._unsupported(f"{what} {tok.text.upper()}", tok)
        if not self._match_texts(("FROM", "IN")):
            self._fail("Expecting FROM or IN")
        name = self._parse_name_part()
        options = self._parse_options() if self._match_text_seq("WITH") else {}
        return ast.Fetch(name, count, options, all=every, move=move)

    def _parse_close_statement(self) -> ast.CloseCursor:
        if self._match(TokenType.ALL):
            return ast.CloseCursor(None)
        return ast.CloseCursor(self._parse_name_part())

    # -- COPY ---------------------------------------------------------------------------------------
    def _parse_copy_statement(self) -> ast.Copy:
        table: str | None = None
        columns: list[str] = []
        query = None
        if self._match(TokenType.L_PAREN):
            query, _ = self._parse_query_with_text()
            self._match_r_paren()
        else:
            table = self._parse_object_name()
            if self._curr and self._curr.token_type == TokenType.L_PAREN:
                columns = self._parse_name_list()
        if self._match(TokenType.FROM):
            to_client = False
            if query is not None:
                self._fail("Expecting TO")
            if not self._match_texts(("STDIN",)):
                raise self._unsupported(
                    "COPY FROM a file or program (use psql's \\copy)", self._curr or self._prev
                )
        elif self._match_text_seq("TO"):
            to_client = True
            if not self._match_texts(("STDOUT",)):
                raise self._unsupported(
                    "COPY TO a file or program (use psql's \\copy)", self._curr or self._prev
                )
        else:
            self._fail("Expecting FROM or TO")
        self._match_text_seq("WITH")
        options: dict[str, str] = {}
        if self._curr and self._curr.token_type == TokenType.L_PAREN:
            self._match_l_paren()
            while True:
                key = self._parse_word()
                value = "true"
                if self._curr and self._curr.token_type not in (TokenType.COMMA, TokenType.R_PAREN):
                    value = self._parse_set_value()
                options[key] = value
                if not self._match(TokenType.COMMA):
                    break
            self._match_r_paren()
        else:  # PostgreSQL's pre-9.0 form: CSV HEADER DELIMITER ',' NULL '' (psql's \copy passes it on)
            while self._curr:
                word = self._parse_word()
                if word in ("csv", "binary"):
                    options["format"] = word
                elif word == "header":
                    options["header"] = "true"
                elif word in ("delimiter", "null"):
                    self._match_text_seq("AS")
                    options[word] = self._parse_option_value()
                else:
                    self._fail("Expecting a COPY option", self._prev)
        return ast.Copy(table, columns, query, to_client, options)

    # -- SHOW / DESCRIBE ----------------------------------------------------------------------------
    def _parse_show_statement(self) -> ast.Statement:
        if self._match(TokenType.ALL):
            return ast.ShowVariable("all")
        if self._match_text_seq("CREATE"):
            for words, kind in _SHOW_CREATE_KINDS:
                if self._match_text_seq(*words):
                    return ast.ShowCreate(kind, self._parse_object_name())
            self._fail("Expecting an object kind")
        for words, name in _SPECIAL_VARIABLES:
            if self._match_text_seq(*words):
                return ast.ShowVariable(name)
        for words, show_kind in _SHOW_KINDS:
            if self._match_text_seq(*words):
                return self._parse_show_objects(show_kind)
        return ast.ShowVariable(self._parse_variable_name())

    def _parse_show_objects(self, kind: ast.ShowKind) -> ast.ShowObjects:
        from_: str | None = None
        if self._match(TokenType.FROM) or self._match(TokenType.IN):
            from_ = self._parse_object_name()
        elif kind == "columns":
            self._fail("Expecting FROM")
        like: str | None = None
        if self._match(TokenType.LIKE):
            if self._curr.token_type != TokenType.STRING:
                self._fail("Expecting a pattern")
            like = self._curr.text
            self._advance()
        return ast.ShowObjects(kind, from_, like)

    def _parse_describe_statement(self) -> ast.Describe:
        return ast.Describe(self._parse_object_name())

    # -- EXPLAIN ------------------------------------------------------------------------------------
    def _parse_explain_statement(self) -> ast.Explain:
        verbose = analyze = False
        options: dict[str, str] = {}
        if self._match(TokenType.L_PAREN, advance=False) and self._next.token_type not in (
            TokenType.SELECT,
            TokenType.WITH,
            TokenType.VALUES,
            TokenType.L_PAREN,
        ):
            self._advance()
            while True:
                key = self._parse_word()
                value = "true"
                if self._curr.token_type not in (TokenType.COMMA, TokenType.R_PAREN):
                    value = self._parse_set_value()
                options[key] = value
                if not self._match(TokenType.COMMA):
                    break
            self._match_r_paren()
            verbose = _truthy(options.pop("verbose", "false"))
            analyze = _truthy(options.pop("analyze", "false"))
        else:
            analyze = self._match_texts(("ANALYZE", "ANALYSE"))
            verbose = self._match_text_seq("VERBOSE")
        start = self._curr
        statement = self.parse_statement_body()
        if not isinstance(statement, ast.EXPLAINABLE):
            self._fail("Expecting an explainable statement", start)
        text = self._find_sql(start, self._prev)
        statement = _with_text(statement, text)
        return ast.Explain(statement, verbose=verbose, analyze=analyze, options=options)

    # -- transactions -------------------------------------------------------------------------------
    def _parse_begin_statement(self) -> ast.Begin:
        self._match_texts(("WORK", "TRANSACTION"))
        return ast.Begin(self._parse_transaction_modes())

    def _parse_start_statement(self) -> ast.Begin:
        self._expect("TRANSACTION")
        return ast.Begin(self._parse_transaction_modes())

    def _parse_transaction_modes(self) -> list[str]:
        modes: list[str] = []
        while self._curr:
            if self._match_text_seq("ISOLATION", "LEVEL"):
                for level in _ISOLATION_LEVELS:
                    if self._match_text_seq(*level):
                        modes.append("isolation level " + " ".join(level).lower())
                        break
                else:
                    self._fail("Expecting an isolation level")
            elif self._match_text_seq("READ", "WRITE") or self._match_text_seq("READ", "ONLY"):
                modes.append("read " + self._prev.text.lower())
            elif self._match_text_seq("NOT", "DEFERRABLE"):
                modes.append("not deferrable")
            elif self._match_text_seq("DEFERRABLE"):
                modes.append("deferrable")
            else:
                break
            self._match(TokenType.COMMA)
        return modes

    def _parse_commit_statement(self) -> ast.Commit:
        self._match_texts(("WORK", "TRANSACTION"))
        if self._match_text_seq("AND", "CHAIN"):
            raise self._unsupported("COMMIT AND CHAIN", self._prev)
        self._match_text_seq("AND", "NO", "CHAIN")
        return ast.Commit()

    def _parse_rollback_statement(self) -> ast.Rollback | ast.RollbackToSavepoint:
        self._match_texts(("WORK", "TRANSACTION"))
        if self._match_text_seq("TO"):
            self._match_text_seq("SAVEPOINT")
            return ast.RollbackToSavepoint(self._parse_savepoint_name())
        if self._match_text_seq("AND", "CHAIN"):
            raise self._unsupported("ROLLBACK AND CHAIN", self._prev)
        self._match_text_seq("AND", "NO", "CHAIN")
        return ast.Rollback()

    def _parse_savepoint_statement(self) -> ast.Savepoint:
        return ast.Savepoint(self._parse_savepoint_name())

    def _parse_release_statement(self) -> ast.ReleaseSavepoint:
        self._match_text_seq("SAVEPOINT")
        return ast.ReleaseSavepoint(self._parse_savepoint_name())

    def _parse_savepoint_name(self) -> str:
        return self._parse_word()


def _truthy(value: str) -> bool:
    return fold(value) in ("true", "on", "1", "yes")


def _with_text(statement: ast.Statement, text: str) -> ast.Statement:
    return replace(statement, text=text)
