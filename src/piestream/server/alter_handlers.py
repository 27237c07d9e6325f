"""ALTER TABLE / MATERIALIZED VIEW / VIEW / SOURCE / SINK / INDEX, TRUNCATE and COMMENT ON:
schema evolution of running objects (issue 31).

Every ALTER runs under the DDL lock and changes the catalog (and the running fragments it
rewrites, `piestream.frontend.schema_change`) in one meta-store transaction between two epochs
(`DdlController.alter`), so a failed ALTER changes nothing and a crash leaves all of it or none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from piestream.common.errors import (
    DependentObjectsStillExist,
    DuplicateObject,
    FeatureNotSupported,
    PiestreamError,
    UndefinedColumn,
    UndefinedTable,
)
from piestream.common.scalar import Datum
from piestream.common.types import DataType
from piestream.expr.bind import cast
from piestream.expr.evaluate import fold_constants
from piestream.expr.expr import Literal
from piestream.frontend.binder.expr_binder import ExprBinder
from piestream.frontend.binder.scope import Scope
from piestream.frontend.catalog import ColumnCatalog, Relation, RelationKind
from piestream.frontend.definition_text import (
    add_column_text,
    drop_column_text,
    has_query,
    references_column,
    rename_column_references_text,
    rename_column_text,
    rename_name_tokens,
    rename_object_text,
    rename_references_in,
)
from piestream.frontend.parser import ast
from piestream.frontend.parser.names import quote_ident
from piestream.frontend.schema_change import add_column as plan_add_column
from piestream.frontend.schema_change import renamed_columns, with_table_desc
from piestream.plan.backfill import BackfillNode
from piestream.server.ddl_handlers import WrongObjectType
from piestream.server.results import QueryResult, command
from piestream.server.settings import ADAPTIVE_WORDS

if TYPE_CHECKING:
    from piestream.server.session import Session


class DuplicateColumn(PiestreamError):
    sqlstate = "42701"


def _tag(kind: str) -> str:
    return f"ALTER {kind.upper()}"


def _target(s: Session, name: str, kind: str, if_exists: bool) -> Relation | None:
    """The relation an ALTER names (None: IF EXISTS and there is none); 42809 if it is not a
    `kind` (an index is altered as ALTER INDEX, a view as ALTER VIEW, as in PostgreSQL)."""
    rel = s.committed_catalog().get_relation(name)
    if rel is None:
        if if_exists:
            return None
        raise UndefinedTable(f'relation "{name}" does not exist')
    if rel.kind.value != kind:
        raise WrongObjectType(f'"{rel.name}" is not a {kind}')
    return rel


def _skipped(kind: str, message: str) -> QueryResult:
    r = command(_tag(kind))
    r.notices.append(message)
    return r


def bind_default(node: exp.Expression | None, t: DataType) -> Datum:
    """The constant a DEFAULT expression is, assigned to `t` (PostgreSQL's assignment cast); 0A000
    if it is not a constant (a volatile default would differ per row: PostgreSQL rewrites the
    table for one, which piestream does not do)."""
    if node is None:
        return None
    bound = ExprBinder(Scope(), context="DEFAULT").bind(node)
    value = fold_constants(cast(bound, t, explicit=False))
    if not isinstance(value, Literal):
        raise FeatureNotSupported(
            "ALTER TABLE ADD COLUMN with a DEFAULT that is not a constant is not supported"
        )
    return value.value


# -- ADD COLUMN -----------------------------------------------------------------------------------


def add_column(s: Session, stmt: ast.AlterAddColumn, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        rel = _target(s, stmt.name, stmt.kind, stmt.if_exists)
        if rel is None:
            return _skipped(stmt.kind, f'relation "{stmt.name}" does not exist, skipping')
        col = stmt.column
        if col.not_null:
            raise FeatureNotSupported(f"ALTER {stmt.kind.upper()} ADD COLUMN ... NOT NULL is not supported")
        if rel.column_index(col.name) is not None:
            message = f'column "{col.name}" of relation "{rel.name}" already exists'
            if stmt.if_not_exists:
                return _skipped(stmt.kind, message + ", skipping")
            raise DuplicateColumn(message)
        if stmt.kind == "source":
            return _add_source_column(s, rel, stmt)
        if col.type is None or col.generated is not None:
            raise FeatureNotSupported("ALTER TABLE ADD COLUMN of a generated column is not supported")
        if col.primary_key:
            raise FeatureNotSupported("ALTER TABLE ADD COLUMN ... PRIMARY KEY is not supported")
        if rel.properties.get("connector") or rel.source is not None:
            connector = rel.properties.get("connector") or "a shared source's"
            raise FeatureNotSupported(
                f'ALTER TABLE ADD COLUMN on table "{rel.name}" with a connector ({connector}) is not '
                "supported: its running job decodes the connector's records into the columns it was "
                "created with. Create a new table with the column, or use a source (ALTER SOURCE ... "
                "ADD COLUMN: jobs created after it decode the column)"
            )
        if rel.table is None or rel.job_id is None:
            raise FeatureNotSupported(f"ALTER TABLE ADD COLUMN on {rel.kind.value} {rel.name}")
        default = bind_default(col.default, col.type)
        graph = s.db.barriers.graph
        if not any(f.job_id == rel.job_id for f in graph.fragments.values()):
            raise PiestreamError(f'table "{rel.name}" is not running (its job failed)', sqlstate="55000")
        column = ColumnCatalog(col.name, col.type, default=default, since=s.db.ddl.next_object_id())
        new, fragments = plan_add_column(rel, column, graph.fragments.values())
        new = _with_definition(new, _add_to_definition(rel.definition, stmt))
        s.db.ddl.alter([(rel, new)], fragments)
        return command(_tag(stmt.kind))


def _add_source_column(s: Session, rel: Relation, stmt: ast.AlterAddColumn) -> QueryResult:
    """A source stores no rows: the column joins its catalog entry (and definition), so jobs
    planned from now on decode it from the messages; running ones keep the columns they read."""
    col = stmt.column
    if col.type is None or col.generated is not None or col.default is not None or col.primary_key:
        raise FeatureNotSupported("ALTER SOURCE ADD COLUMN takes a name and a type only")
    if not rel.columns:
        raise FeatureNotSupported(
            f'ALTER SOURCE ADD COLUMN on source "{rel.name}", which has no columns (CDC)'
        )
    text = add_column_text(rel.definition, stmt.column_text)
    if text is None:
        raise FeatureNotSupported(f'ALTER SOURCE ADD COLUMN on source "{rel.name}" declared without columns')
    column = ColumnCatalog(col.name, col.type, since=s.db.ddl.next_object_id())
    s.db.ddl.alter([(rel, replace(rel, columns=(*rel.columns, column), definition=text))])
    return command("ALTER SOURCE")


def _add_to_definition(definition: str, stmt: ast.AlterAddColumn) -> str | None:
    return add_column_text(definition, stmt.column_text)


def _with_definition(rel: Relation, definition: str | None) -> Relation:
    """`rel` with its edited definition; where the text had no column list to edit (CREATE TABLE
    ... AS), a CREATE TABLE of what the table now is."""
    if definition is None:
        definition = table_definition(rel)
    return replace(rel, definition=definition)


def table_definition(rel: Relation) -> str:
    """CREATE TABLE of a table's visible columns and primary key."""
    from piestream.expr.coercion import type_name

    cols = [f"{quote_ident(c.name)} {type_name(c.data_type)}" for c in rel.visible_columns]
    if rel.row_id_index is None and rel.table is not None:
        cols.append(f"PRIMARY KEY ({', '.join(quote_ident(rel.columns[i].name) for i in rel.table.pk)})")
    return f"CREATE TABLE {quote_ident(rel.name)} ({', '.join(cols)})"


# -- RENAME TO / RENAME COLUMN ----------------------------------------------------------------------


def rename(s: Session, stmt: ast.AlterRename, params: Sequence[Any] = ()) -> QueryResult:
    """Relations are bound by id (an MV's running plan, an index's `IndexInfo`, a subscription's
    `of`, owners and grants), so a rename changes names only; what names the relation in SQL
    text — the definitions of views (bound again on every read), MVs (on REBUILD), indexes and
    sinks — is rewritten in the same transaction, as PostgreSQL's views follow a rename."""
    with s.db.ddl.lock:
        rel = _target(s, stmt.name, stmt.kind, stmt.if_exists)
        if rel is None:
            return _skipped(stmt.kind, f'relation "{stmt.name}" does not exist, skipping')
        if stmt.column is not None:
            return _rename_column(s, rel, stmt.column, stmt.new_name)
        cat = s.committed_catalog()
        if (rel.schema_name, stmt.new_name) in cat.by_name:
            raise DuplicateObject(f'relation "{stmt.new_name}" already exists')
        new = replace(rel, name=stmt.new_name, definition=rename_object_text(rel.definition, stmt.new_name))
        swaps = [(rel, new)]
        for d in cat.dependents(rel.id):
            if d.definition:
                text = rename_references_in(d.definition, rel.name, rel.schema_name, stmt.new_name)
                swaps.append((d, replace(d, definition=text)))
        s.db.ddl.alter(swaps)
        return command(_tag(stmt.kind))


def _rename_column(s: Session, rel: Relation, old: str, new_name: str) -> QueryResult:
    i = rel.column_index(old)
    if i is None or rel.columns[i].hidden:
        raise UndefinedColumn(f'column "{old}" does not exist')
    if rel.column_index(new_name) is not None:
        raise DuplicateColumn(f'column "{new_name}" of relation "{rel.name}" already exists')
    if rel.properties.get("connector") or rel.source is not None:
        raise FeatureNotSupported("ALTER TABLE RENAME COLUMN on a table with a connector is not supported")
    assert rel.table is not None
    desc = replace(
        rel.table,
        columns=tuple(replace(c, name=new_name) if c.name == old else c for c in rel.table.columns),
    )
    new = replace(rel, columns=renamed_columns(rel.columns, old, new_name), table=desc)
    new = _with_definition(new, rename_column_text(rel.definition, old, new_name))
    swaps = [(rel, new)]
    cat = s.committed_catalog()
    by_id = {r.id: r for r in cat.relations()}
    swaps += [(d, _column_renamed_in(d, rel, old, new_name, by_id)) for d in cat.dependents(rel.id)]
    fragments = with_table_desc(s.db.barriers.graph.fragments.values(), desc)
    s.db.ddl.alter(swaps, fragments)
    return command("ALTER TABLE")


def _column_renamed_in(
    d: Relation, rel: Relation, old: str, new_name: str, by_id: dict[int, Relation]
) -> Relation:
    """Dependent `d` of `rel` after `rel`'s column `old` became `new_name`: an index's key and
    columns (the batch planner matches index columns by name), a query's references."""
    if d.index is not None and d.index.index_of == rel.id:
        cols = tuple(new_name if c == old else c for c in d.index.columns)
        assert d.table is not None
        desc = replace(
            d.table, columns=tuple(replace(c, name=new_name) if c.name == old else c for c in d.table.columns)
        )
        text = rename_name_tokens(d.definition, old, new_name, ("(", ","))
        return replace(
            d,
            index=replace(d.index, columns=cols),
            columns=renamed_columns(d.columns, old, new_name),
            table=desc,
            definition=text,
        )
    if not d.definition or not has_query(d.definition):
        return d  # a sink or subscription FROM the table: bound by id, it keeps its columns
    others = {c.name for dep in d.depends_on if dep != rel.id and (o := by_id.get(dep)) for c in o.columns}
    edited = rename_column_references_text(d.definition, rel.name, old, new_name, others)
    if edited is None:
        raise FeatureNotSupported(
            f'cannot rename column "{old}" of table "{rel.name}": {d.kind.value} "{d.name}" '
            "refers to it in a way ALTER cannot rewrite",
            hint=f"Drop and recreate {d.kind.value} {d.name}, or qualify the column with the table name.",
        )
    return replace(d, definition=edited)


# -- DROP COLUMN ------------------------------------------------------------------------------------


def dropped_name(index: int) -> str:
    """PostgreSQL's name of a dropped column (its attnum), which no SQL name can collide with."""
    return f"........pg.dropped.{index + 1}........"


def drop_column(s: Session, stmt: ast.AlterDropColumn, params: Sequence[Any] = ()) -> QueryResult:
    """The column leaves the catalog, not the stored rows: it stays in the storage layout as a
    hidden column (PostgreSQL's ``attisdropped``) that new rows write NULL to, so no SST is
    rewritten and every running job keeps its plan."""
    with s.db.ddl.lock:
        rel = _target(s, stmt.name, "table", stmt.if_exists)
        if rel is None:
            return _skipped("table", f'relation "{stmt.name}" does not exist, skipping')
        i = rel.column_index(stmt.column)
        if i is None or rel.columns[i].hidden:
            message = f'column "{stmt.column}" of relation "{rel.name}" does not exist'
            if stmt.column_if_exists:
                return _skipped("table", message + ", skipping")
            raise UndefinedColumn(message)
        assert rel.table is not None
        if rel.row_id_index is None and i in rel.table.pk:
            raise FeatureNotSupported(
                f'cannot drop column "{stmt.column}": it is in the primary key of "{rel.name}"'
            )
        if rel.watermark is not None and rel.watermark.column == i:
            raise FeatureNotSupported(
                f'cannot drop column "{stmt.column}": the watermark of "{rel.name}" is on it'
            )
        if rel.properties.get("connector") or rel.source is not None:
            raise FeatureNotSupported("ALTER TABLE DROP COLUMN on a table with a connector is not supported")
        users = _column_users(s, rel, i)
        if users and not stmt.cascade:
            raise DependentObjectsStillExist(
                f"cannot drop column {stmt.column} of table {rel.name} because other objects depend on it",
                detail="\n".join(
                    f"{u.kind.value} {u.name} depends on column {stmt.column} of table {rel.name}"
                    for u in users
                ),
                hint="Use DROP ... CASCADE to drop the dependent objects too.",
            )
        notices = []
        if users:
            gone = s.db.ddl.drop(users, cascade=True)
            notices = [f"drop cascades to {r.kind.value} {r.name}" for r in gone]
            rel = s.committed_catalog().require(stmt.name)
        table = rel.table
        assert table is not None
        hidden = dropped_name(i)
        cols = list(rel.columns)
        cols[i] = replace(cols[i], name=hidden, hidden=True, default=None)
        desc = replace(
            table,
            columns=tuple(
                replace(c, name=hidden, hidden=True) if k == i else c for k, c in enumerate(table.columns)
            ),
        )
        new = replace(rel, columns=tuple(cols), table=desc)
        new = _with_definition(new, drop_column_text(rel.definition, stmt.column))
        s.db.ddl.alter([(rel, new)], with_table_desc(s.db.barriers.graph.fragments.values(), desc))
        res = command("ALTER TABLE")
        res.notices += notices
        return res


def _column_users(s: Session, rel: Relation, index: int) -> list[Relation]:
    """The dependents of `rel` that read its column `index`: a view whose query names the column
    or ``*`` (bound again on every read, as PostgreSQL counts it); a job (MV, index, sink,
    subscription) whose backfill of the table outputs it, or that reads the table some other way."""
    assert rel.table is not None
    name = rel.columns[index].name
    graph = s.db.barriers.graph
    out = []
    for d in s.committed_catalog().dependents(rel.id):
        if d.kind is RelationKind.VIEW:
            if d.definition and references_column(d.definition, name):
                out.append(d)
            continue
        frags = [f for f in graph.fragments.values() if f.job_id == d.job_id] or (
            s.db.catalog.job_fragments(d.job_id) if d.job_id is not None else []
        )
        scans = [
            n
            for f in frags
            for n in f.root.walk()
            if isinstance(n, BackfillNode) and n.upstream.table_id == rel.table.table_id
        ]
        if not scans or any(index in n.output_indices for n in scans):
            out.append(d)
    return out


# -- TRUNCATE -------------------------------------------------------------------------------------


def truncate(s: Session, stmt: ast.Truncate, params: Sequence[Any] = ()) -> QueryResult:
    """Every row of the tables deleted in one epoch (their deletes flow to the MVs over them): in
    the transaction block when there is one (TRUNCATE is transactional in PostgreSQL), else in
    a block of its own."""
    from piestream.server import dml
    from piestream.server.transaction import in_block

    for name in stmt.names:
        _target(s, name, "table", False)
    with in_block(s):
        for name in stmt.names:
            dml.delete(s, ast.Delete(table=name))
    return command("TRUNCATE TABLE")


# -- COMMENT ON -------------------------------------------------------------------------------------


def comment_on(s: Session, stmt: ast.CommentOn, params: Sequence[Any] = ()) -> QueryResult:
    """The comment is kept in the relation's catalog entry (NULL removes it), read by
    pg_description, obj_description / col_description and psql's \\d+."""
    with s.db.ddl.lock:
        if stmt.column is None:
            rel = _target(s, stmt.name, stmt.kind, False)
            assert rel is not None
            new = replace(rel, comment=stmt.comment)
        else:
            rel = s.committed_catalog().require(stmt.name)
            i = rel.column_index(stmt.column)
            if i is None or rel.columns[i].hidden:
                raise UndefinedColumn(f'column "{stmt.column}" of relation "{rel.name}" does not exist')
            cols = list(rel.columns)
            cols[i] = replace(cols[i], comment=stmt.comment)
            new = replace(rel, columns=tuple(cols))
        s.db.ddl.alter([(rel, new)])
        return command("COMMENT")


def set_parallelism(s: Session, stmt: ast.AlterParallelism, params: Sequence[Any] = ()) -> QueryResult:
    """ALTER {TABLE | MATERIALIZED VIEW | SINK | SOURCE} name SET PARALLELISM = n | ADAPTIVE
    (RisingWave's): the job's fragments run n actors from the next epoch, over the same
    vnode-keyed state (no data is copied), and keep n across restarts (FIXED). ADAPTIVE (or
    AUTO / DEFAULT, which mean it) runs as many as the cluster has task slots now and follows
    them as executors join and leave (`DdlController.follow_slots`)."""
    if stmt.kind == "source":
        rel = s.committed_catalog().get_relation(stmt.name)
        if rel is not None and rel.kind is RelationKind.SOURCE:
            raise FeatureNotSupported(
                f'cannot change the parallelism of source "{rel.name}": a source without a table '
                "runs inside each job that reads it",
                hint="Alter the materialized views or sinks that read it, or a table with a connector.",
            )
        kind = "table"  # a table with a connector is RisingWave's "SOURCE-table"
    else:
        kind = stmt.kind
    value = stmt.value.strip().lower()
    adaptive = value in ADAPTIVE_WORDS
    if not adaptive and (not value.isdigit() or int(value) < 1):
        raise PiestreamError(f'parallelism must be a positive integer, got "{stmt.value}"', sqlstate="22023")
    rel = _target(s, stmt.name, kind, False)
    assert rel is not None
    if stmt.kind == "source" and not rel.properties.get("connector"):
        raise WrongObjectType(f'"{rel.name}" is not a source')
    n = s.db.cluster_slots() if adaptive else int(value)
    plan = s.db.ddl.rescale(rel, n, adaptive=adaptive)
    r = command(_tag(stmt.kind))
    r.notices.extend(plan.capped)
    return r
