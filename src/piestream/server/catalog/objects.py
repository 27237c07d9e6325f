"""How piestream relations appear as PostgreSQL catalog objects.

The fixed oids of the built-in objects (namespaces, the superuser, the database, access methods),
a relation's oid and relkind, its primary key's index and constraint, and the query text of a
view definition. Both the catalog rows and the system functions describe relations this way, so
the oids one hands out are the oids the other resolves.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from piestream.frontend.catalog import VIEW_COLUMN_LIST, FunctionCatalog, Relation, RelationKind
from piestream.frontend.parser import parse_one
from piestream.frontend.parser.ast import CreateIndex
from piestream.frontend.parser.names import identifier_name, quote_ident

OID_OFFSET = 16384
PG_CATALOG_NS = 11
PUBLIC_NS = 2200
INFORMATION_SCHEMA_NS = 13183
PG_TOAST_NS = 99
TEMP_NAMESPACE_OIDS = 15000  # the sessions' pg_temp_... schemas: 15000, 15001, ...
SUPERUSER_OID = 10
DATABASE_OID = 16384 - 1
HEAP_AM, BTREE_AM = 2, 403
FOREIGN_SERVER_OID = 16383 - 100  # the one "server" every source reads through
PYTHON_LANG = 16383 - 200  # pg_language's row for LANGUAGE python
SERVER_VERSION = "13.14.0"
VERSION_STRING = (
    f"PostgreSQL {SERVER_VERSION}-piestream on x86_64-pc-linux-gnu, compiled by piestream (Python)"
)

KIND_CHAR = {
    RelationKind.TABLE: "r",
    RelationKind.MATERIALIZED_VIEW: "m",
    RelationKind.VIEW: "v",
    RelationKind.INDEX: "i",
    RelationKind.SOURCE: "f",
}


def rel_oid(rel: Relation) -> int:
    return rel.id + OID_OFFSET


def function_oid(f: FunctionCatalog) -> int:
    """A user function's pg_proc oid (functions and relations share the id sequence)."""
    return f.id + OID_OFFSET


def rule_oid(rel: Relation) -> int:
    """The oid of a view's / MV's ``_RETURN`` rule (pg_rewrite), whose pg_depend rows name what
    the query reads."""
    return rel_oid(rel) + 2_000_000


def pk_names(r: Relation) -> str:
    assert r.table is not None
    return ", ".join(r.columns[i].name for i in r.table.pk)


def has_user_pk(r: Relation) -> bool:
    return (
        r.kind is RelationKind.TABLE and r.table is not None and bool(r.table.pk) and r.row_id_index is None
    )


def pkey_oid(r: Relation) -> int | None:
    return rel_oid(r) + 1_000_000 if has_user_pk(r) else None


def index_stored_columns(index: Relation) -> list[str]:
    """An index's columns as pg_index.indkey lists them: its keys in key order, then the columns
    it also stores (INCLUDE)."""
    keys = list(index.index.columns) if index.index is not None else []
    return [*keys, *(c.name for c in index.visible_columns if c.name not in keys)]


def index_keys(index: Relation) -> list[tuple[str, bool]]:
    """An index's key columns with whether each is DESC (from its CREATE INDEX text)."""
    stmt = parse_one(index.definition)
    if isinstance(stmt, CreateIndex):
        return [(c.name, c.desc) for c in stmt.columns]
    return [(c, False) for c in (index.index.columns if index.index is not None else ())]


def indexdef(index: Relation, base: Relation) -> str:
    """pg_get_indexdef of a secondary index, in PostgreSQL's form (``CREATE INDEX i ON s.t USING
    btree (k DESC) INCLUDE (c)``): psql's ``\\d`` shows the part after USING."""
    keys = [quote_ident(name) + (" DESC" if desc else "") for name, desc in index_keys(index)]
    stored = index_stored_columns(index)[len(keys) :]
    table = f"{quote_ident(base.schema_name)}.{quote_ident(base.name)}"
    include = f" INCLUDE ({', '.join(quote_ident(c) for c in stored)})" if stored else ""
    return f"CREATE INDEX {quote_ident(index.name)} ON {table} USING btree ({', '.join(keys)}){include}"


def pkey_indexdef(r: Relation) -> str:
    """pg_get_indexdef of a table's primary key index."""
    table = f"{quote_ident(r.schema_name)}.{quote_ident(r.name)}"
    return f"CREATE UNIQUE INDEX {r.name}_pkey ON {table} USING btree ({pk_names(r)})"


def query_part(definition: str) -> str:
    """``SELECT ...`` of ``CREATE [MATERIALIZED] VIEW name [(cols)] AS SELECT ...`` (psql shows
    only that); a view's definition is its query already (its own ``AS`` aliases stay)."""
    body, _ = _split_definition(definition)
    return " " + body.strip().rstrip(";") + ";"


def _split_definition(definition: str) -> tuple[str, bool]:
    """(the query, whether a column list precedes it) of a CREATE [MATERIALIZED] VIEW; the
    first ``AS`` outside parentheses ends the head (a quoted name may hold the word)."""
    from piestream.frontend.definition_text import _tokens

    if re.match(r"\s*CREATE\b", definition, re.IGNORECASE) is None:
        return definition, False
    try:
        toks = _tokens(definition)
    except Exception:  # sqlglot's TokenError: text it cannot tokenize stays whole
        return definition, False
    depth, columns = 0, False
    for k, t in enumerate(toks):
        if t.token_type == TokenType.L_PAREN:
            columns = columns or (depth == 0 and toks[k - 1].text.upper() != "WITH")
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and t.token_type == TokenType.ALIAS:
            return definition[t.end + 1 :], columns
    return definition, False


def _output_names(query: str) -> list[str] | None:
    """The column names `query` produces, where its text alone says them (a plain SELECT of
    columns and aliased expressions); None otherwise (``*``, set operations, unnamed ones)."""
    try:
        tree = sqlglot.parse_one(query.strip().rstrip(";"), read="postgres")
    except sqlglot.errors.SqlglotError:
        return None
    if not isinstance(tree, exp.Select):
        return None
    names = []
    for e in tree.selects:
        if not isinstance(e, exp.Alias | exp.Column) or isinstance(e.unalias(), exp.Star):
            return None
        if isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            return None
        names.append(identifier_name(e.args["alias"] if isinstance(e, exp.Alias) else e.this))
    return names


def view_query(r: Relation) -> str:
    """What pg_get_viewdef / pg_views / pg_matviews show for a view or MV: the query as the user
    wrote it; when the relation's column names are not the query's own (``CREATE VIEW v (x, y)
    AS ...``), the query wrapped in ``SELECT * FROM (query) AS v(x, y)``, so that pg_dump's
    ``CREATE VIEW v AS <this>`` restores the same columns."""
    body, has_columns = _split_definition(r.definition)
    body = body.strip().rstrip(";").strip()
    names = [c.name for c in r.visible_columns]
    said = _output_names(body)
    if said == names or (said is None and not has_columns and r.kind is RelationKind.MATERIALIZED_VIEW):
        return f" {body};"
    if said is None and r.kind is RelationKind.VIEW and VIEW_COLUMN_LIST not in r.properties:
        return f" {body};"  # `*` or a set operation, and no column list: the query's names
    cols = ", ".join(quote_ident(n) for n in names)
    return f" SELECT * FROM ({body}) AS {quote_ident(r.name)}({cols});"


#: connector options never shown in the catalogs (pg_dump writes ftoptions into its script):
#: passwords, secrets, tokens, keys and librdkafka's SASL configs (a JAAS or OAuth config holds
#: the password or client secret)
_SECRET_OPTION = re.compile(
    r"password|passwd|secret|token|credential|private|jaas|oauth|sasl\.username|\.key\b|key\.pem|keystore|"
    r"access.?key|api.?key",
    re.IGNORECASE,
)
#: the ``user:password@`` of a URL value (a schema registry's), left out of what is shown
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


def _shown(value: str) -> str:
    return _URL_USERINFO.sub("", value)


def source_options(r: Relation) -> list[str]:
    """A source's ``name=value`` foreign-table options (pg_foreign_table.ftoptions): its WITH
    options and FORMAT / ENCODE, so that pg_dump's ``CREATE FOREIGN TABLE ... OPTIONS (...)``
    says what it reads; secrets (passwords, keys) are left out."""
    opts = {k: v for k, v in r.properties.items() if not _SECRET_OPTION.search(k)}
    info = r.source
    if info is not None:
        if info.format:
            opts.setdefault("format", info.format)
        if info.encode:
            opts.setdefault("encode", info.encode)
        for k, v in info.encode_options.items():
            if not _SECRET_OPTION.search(k):
                opts.setdefault(k, v)
    return [f"{k}={_shown(v)}" for k, v in sorted(opts.items())]
