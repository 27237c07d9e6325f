"""Roles and privileges: CREATE / ALTER / DROP USER | ROLE, GRANT / REVOKE on relations and schemas,
ALTER ... OWNER TO.

PostgreSQL's syntax, the subset piestream implements; the rest of it (role membership, column
privileges, GRANT OPTION, VALID UNTIL, CONNECTION LIMIT ...) is refused with 0A000.
"""

from __future__ import annotations

from sqlglot.tokens import TokenType

from piestream.frontend.parser import ast
from piestream.frontend.parser.base import ParserBase

#: option keyword -> (RoleOptions field, value)
_FLAGS: dict[str, tuple[str, bool]] = {
    "SUPERUSER": ("superuser", True),
    "NOSUPERUSER": ("superuser", False),
    "LOGIN": ("login", True),
    "NOLOGIN": ("login", False),
    "CREATEDB": ("createdb", True),
    "NOCREATEDB": ("createdb", False),
    "CREATEROLE": ("createrole", True),
    "NOCREATEROLE": ("createrole", False),
}

_UNSUPPORTED_OPTIONS = frozenset(
    {
        "INHERIT", "NOINHERIT", "REPLICATION", "NOREPLICATION", "BYPASSRLS", "NOBYPASSRLS",
        "CONNECTION", "VALID", "IN", "ROLE", "ADMIN", "USER", "SYSID", "ENCRYPTED", "UNENCRYPTED",
        "OAUTH", "CREATEUSER", "NOCREATEUSER",
    }
)  # fmt: skip

_OBJECT_KINDS: tuple[tuple[str, ...], ...] = (
    ("TABLE",),
    ("MATERIALIZED", "VIEW"),
    ("VIEW",),
    ("SOURCE",),
)


class RoleParser(ParserBase):
    """The statements of this module (their leading keyword already consumed)."""

    def _parse_role_name(self) -> str:
        return self._parse_name_part()

    def _parse_role_options(self) -> ast.RoleOptions:
        self._match_text_seq("WITH")
        flags: dict[str, bool] = {}
        password: str | None = None
        seen: set[str] = set()
        while self._curr:
            word = self._curr.text.upper()
            if word == "PASSWORD":
                self._advance()
                if self._match(TokenType.NULL):
                    password = ""
                elif self._curr and self._curr.token_type == TokenType.STRING:
                    password = self._curr.text
                    self._advance()
                    if password == "":
                        self._fail("empty password is not allowed (use PASSWORD NULL)", self._prev)
                else:
                    self._fail("Expecting a password string or NULL")
                field = "password"
            elif word in _FLAGS:
                self._advance()
                field, flag = _FLAGS[word]
                flags[field] = flag
            elif word in _UNSUPPORTED_OPTIONS:
                raise self._unsupported(f"role option {word}", self._curr)
            else:
                self._fail("Expecting a role option")
            if field in seen:
                self._fail("conflicting or redundant options", self._prev)
            seen.add(field)
        return ast.RoleOptions(
            superuser=flags.get("superuser"),
            login=flags.get("login"),
            createdb=flags.get("createdb"),
            createrole=flags.get("createrole"),
            password=password,
        )

    def _parse_create_role(self, is_user: bool) -> ast.CreateRole:
        name = self._parse_role_name()
        return ast.CreateRole(name, self._parse_role_options(), is_user=is_user)

    def _parse_alter_role(self) -> ast.AlterRole:
        start = self._prev
        name = self._parse_role_name()
        if self._match_text_seq("RENAME", "TO"):
            return ast.AlterRole(name, ast.RoleOptions(), rename_to=self._parse_role_name())
        if self._match(TokenType.SET) or self._match_text_seq("RESET"):
            raise self._unsupported("ALTER ROLE ... SET / RESET", start)
        opts = self._parse_role_options()
        if opts == ast.RoleOptions():
            self._fail("Expecting a role option")
        return ast.AlterRole(name, opts)

    def _parse_drop_role(self) -> ast.DropRole:
        if_exists = self._match_text_seq("IF", "EXISTS")
        names = [self._parse_role_name()]
        while self._match(TokenType.COMMA):
            names.append(self._parse_role_name())
        return ast.DropRole(names, if_exists)

    def _parse_grant_statement(self, revoke: bool) -> ast.Grant:
        start = self._prev
        if revoke and self._match_text_seq("GRANT", "OPTION", "FOR"):
            raise self._unsupported("REVOKE GRANT OPTION FOR", start)
        privileges: list[str] = []
        all_privileges = bool(self._match(TokenType.ALL))
        if all_privileges:
            self._match_text_seq("PRIVILEGES")
        else:
            while True:
                tok = self._curr
                word = tok.text.upper() if tok else ""
                if word in ast.RELATION_PRIVILEGES or word in ast.SCHEMA_PRIVILEGES:
                    self._advance()
                    if self._match(TokenType.L_PAREN, advance=False):
                        raise self._unsupported("column privileges", tok)
                    if word not in privileges:
                        privileges.append(word)
                elif word in ("REFERENCES", "TRIGGER", "CONNECT", "TEMPORARY", "TEMP", "EXECUTE",
                              "MAINTAIN"):  # fmt: skip
                    raise self._unsupported(f"privilege {word}", tok)
                elif tok and not privileges and self._next and self._next.text.upper() in ("TO", "FROM", ","):
                    raise self._unsupported("GRANT / REVOKE of role membership", start)
                else:
                    self._fail(
                        "Expecting a privilege (SELECT, INSERT, UPDATE, DELETE, TRUNCATE, USAGE, CREATE, ALL)"
                    )
                if not self._match(TokenType.COMMA):
                    break
        self._expect("ON")
        kind: str | None = None
        if self._match(TokenType.ALL):
            if not self._match_text_seq("TABLES", "IN", "SCHEMA"):
                word = self._curr.text.upper() if self._curr else ""
                raise self._unsupported(f"GRANT / REVOKE ON ALL {word} IN SCHEMA", start)
            kind = "all tables in schema"
        elif self._match_text_seq("SCHEMA"):
            kind = "schema"
        else:
            for words in _OBJECT_KINDS:
                if self._match_text_seq(*words):
                    kind = " ".join(words).lower()
                    break
            else:
                word = self._curr.text.upper() if self._curr else ""
                if word in ("DATABASE", "FUNCTION", "SEQUENCE", "SINK", "PROCEDURE", "ROUTINE"):
                    raise self._unsupported(f"GRANT / REVOKE ON {word}", self._curr)
        in_schema = kind in ("schema", "all tables in schema")
        if all_privileges:
            privileges = list(ast.SCHEMA_PRIVILEGES if kind == "schema" else ast.RELATION_PRIVILEGES)
        parse_name = self._parse_name_part if in_schema else self._parse_object_name
        relations = [parse_name()]
        while self._match(TokenType.COMMA):
            relations.append(parse_name())
        self._expect("FROM" if revoke else "TO")
        grantees = [self._parse_role_grantee()]
        while self._match(TokenType.COMMA):
            grantees.append(self._parse_role_grantee())
        if not revoke and self._match_text_seq("WITH", "GRANT", "OPTION"):
            raise self._unsupported("WITH GRANT OPTION", self._prev)
        if self._match_text_seq("GRANTED", "BY"):
            raise self._unsupported("GRANTED BY", self._prev)
        if revoke and self._match_texts(("CASCADE", "RESTRICT")):
            pass  # no grant options, so nothing depends on a grant: both mean the same
        return ast.Grant(tuple(privileges), relations, grantees, revoke=revoke, kind=kind)

    def _parse_role_grantee(self) -> str:
        if self._match_text_seq("GROUP"):
            raise self._unsupported("GRANT TO GROUP", self._prev)
        if (
            self._curr
            and self._curr.token_type != TokenType.IDENTIFIER
            and self._curr.text.upper() == "PUBLIC"
        ):
            self._advance()
            return "public"
        return self._parse_role_name()

    def _parse_owner_to(self, kind: str, name: str) -> ast.AlterOwner:
        """The rest of ALTER kind name OWNER TO role (OWNER consumed)."""
        self._expect("TO")
        if self._curr and self._curr.token_type != TokenType.IDENTIFIER and self._curr.text.upper() in (
            "CURRENT_USER", "SESSION_USER", "CURRENT_ROLE",
        ):  # fmt: skip
            word = self._curr.text.lower()
            self._advance()
            return ast.AlterOwner(kind, name, "session_user" if word == "session_user" else "current_user")
        return ast.AlterOwner(kind, name, self._parse_role_name())
