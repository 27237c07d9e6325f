"""Editing stored definitions (the SQL text a relation was created with) for ALTER.

A table's definition is what SHOW CREATE TABLE shows; a view's query is bound again on every
read and an MV's on REBUILD, so after ALTER ... RENAME TO / ADD COLUMN the text must say what the
object now is. Edits are made on the tokens' and identifiers' positions in the text (everything
else stays as the user wrote it), the way RisingWave rewrites a table's definition on ALTER.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from piestream.frontend.parser.names import fold, quote_ident

_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)


def _tokens(sql: str) -> list[Token]:
    from piestream.frontend.parser.dialect import Piestream

    return list(Piestream().tokenize(sql))


def _folded(tok: Token) -> str:
    return tok.text if tok.token_type == TokenType.IDENTIFIER else fold(tok.text)


def _splice(sql: str, spans: list[tuple[int, int, str]]) -> str:
    """`sql` with each (start, end inclusive, text) span replaced (spans do not overlap)."""
    out = sql
    for start, end, text in sorted(spans, reverse=True):
        out = out[:start] + text + out[end + 1 :]
    return out


def _column_list(toks: list[Token]) -> tuple[int, int] | None:
    """Token indices of the parentheses of CREATE TABLE's (or SOURCE's) column list (None: it
    has none)."""
    i = next(
        (k for k, t in enumerate(toks) if t.token_type == TokenType.TABLE or t.text.upper() == "SOURCE"), None
    )
    if i is None:
        return None
    k = i + 1
    while k < len(toks) and toks[k].token_type != TokenType.L_PAREN:
        if toks[k].token_type == TokenType.ALIAS or toks[k].text.upper() in ("WITH", "APPEND", "FROM"):
            return None  # CREATE TABLE ... AS query / WITH (...) without columns
        k += 1
    if k == len(toks):
        return None
    depth = 0
    for j in range(k, len(toks)):
        if toks[j].token_type == TokenType.L_PAREN:
            depth += 1
        elif toks[j].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return k, j
    return None


def add_column_text(definition: str, column_text: str) -> str | None:
    """A CREATE TABLE with `column_text` appended to its column list (None: no list to edit)."""
    toks = _tokens(definition)
    span = _column_list(toks)
    if span is None:
        return None
    open_i, close_i = span
    close = toks[close_i]
    sep = "" if close_i == open_i + 1 else ", "
    return _splice(definition, [(close.start, close.start - 1, sep + column_text)])


def rename_column_text(definition: str, old: str, new: str) -> str | None:
    """A CREATE TABLE whose column list names column `old` as `new` (its definition, PRIMARY
    KEY and WATERMARK clauses); None when there is no column list to edit."""
    toks = _tokens(definition)
    span = _column_list(toks)
    if span is None:
        return None
    spans = [
        (t.start, t.end, quote_ident(new))
        for t in toks[span[0] + 1 : span[1]]
        if t.token_type in _NAME_TOKENS and _folded(t) == old
    ]
    return _splice(definition, spans)


def rename_object_text(definition: str, new: str) -> str:
    """A CREATE statement with the created object's own name (last part) replaced by `new` (a
    view's definition is its query alone, which does not name it: unchanged)."""
    toks = _tokens(definition)
    if not toks or toks[0].token_type != TokenType.CREATE:
        return definition
    for k, t in enumerate(toks):
        if t.token_type in _NAME_TOKENS and k > 0 and toks[k - 1].text.upper() not in ("CREATE", "OR"):
            if t.text.upper() in ("TEMP", "TEMPORARY", "MATERIALIZED", "IF", "NOT", "EXISTS", "REPLACE"):
                continue
            # the name, maybe qualified: its last part is the object's own name
            j = k
            while j + 2 < len(toks) and toks[j + 1].token_type == TokenType.DOT:
                j += 2
            last = toks[j]
            return _splice(definition, [(last.start, last.end, quote_ident(new))])
    return definition


def rename_references_text(definition: str, old: str, schema: str, new: str) -> str:
    """A view's query (or a CREATE statement holding one) naming relation `schema.old` as `new`:
    its table references and the column qualifiers that name it (not an alias or CTE of that
    name, which stay). Positions come from the parsed identifiers."""
    from piestream.frontend.parser import parse_one

    stmt = parse_one(definition)
    tree = stmt if isinstance(stmt, exp.Expression) else getattr(stmt, "query", None)
    if not isinstance(tree, exp.Expression):
        return definition
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    aliases = {t.alias for t in tree.find_all(exp.Table) if t.alias}
    spans: list[tuple[int, int, str]] = []
    for t in tree.find_all(exp.Table):
        ident = t.this
        db = t.args.get("db")
        if not isinstance(ident, exp.Identifier) or ident.name != old:
            continue
        if db is None and old in ctes:
            continue
        if db is not None and db.name != schema:
            continue
        _span(ident, new, spans)
    if old not in aliases and old not in ctes:
        for c in tree.find_all(exp.Column):
            q = c.args.get("table")
            if isinstance(q, exp.Identifier) and q.name == old:
                _span(q, new, spans)
    return _splice(definition, spans)


def _span(ident: exp.Identifier, new: str, spans: list[tuple[int, int, str]]) -> None:
    meta = ident.meta
    if "start" not in meta or "end" not in meta:
        raise ValueError("identifier without a position")
    spans.append((meta["start"], meta["end"], quote_ident(new)))  # a quoted one's span has its quotes


def rename_column_references_text(
    definition: str, table: str, old: str, new: str, other_columns: set[str]
) -> str | None:
    """A view's (or a CREATE statement's) query naming column `old` of relation `table` as
    `new`: references qualified by the table's name or an alias of it, and unqualified ones when
    nothing else in the query could be called `old` (no other relation it reads has such a
    column, `other_columns`, and no alias or CTE is named so). None when a reference is
    ambiguous to this rule: the caller refuses the rename rather than guess."""
    from piestream.frontend.parser import parse_one

    stmt = parse_one(definition)
    tree = stmt if isinstance(stmt, exp.Expression) else getattr(stmt, "query", None)
    if not isinstance(tree, exp.Expression):
        return definition
    quals = {table} | {t.alias for t in tree.find_all(exp.Table) if t.name == table and t.alias}
    named = {a.alias for a in tree.find_all(exp.Alias)} | {c.alias_or_name for c in tree.find_all(exp.CTE)}
    named |= {i.name for ta in tree.find_all(exp.TableAlias) for i in ta.args.get("columns") or ()}
    spans: list[tuple[int, int, str]] = []
    for c in tree.find_all(exp.Column):
        if c.name != old or not isinstance(c.this, exp.Identifier):
            continue
        q = c.args.get("table")
        if q is not None:
            if q.name in quals:
                _span(c.this, new, spans)
            continue
        if old in other_columns or old in named:
            return None
        _span(c.this, new, spans)
    return _splice(definition, spans)


def rename_name_tokens(definition: str, old: str, new: str, after: tuple[str, ...]) -> str:
    """A statement without a query (CREATE INDEX ... ON t, CREATE SINK ... FROM t) naming `old`
    as `new` where a name follows one of the keywords `after`."""
    toks = _tokens(definition)
    spans = []
    for k in range(1, len(toks)):
        t = toks[k]
        if t.token_type in _NAME_TOKENS and _folded(t) == old:
            j = k - 1
            if j >= 1 and toks[j].token_type == TokenType.DOT:
                j -= 2  # schema-qualified: the keyword comes before the schema
            if j >= 0 and toks[j].text.upper() in after:
                spans.append((t.start, t.end, quote_ident(new)))
    return _splice(definition, spans)


def rename_references_in(definition: str, old: str, schema: str, new: str) -> str:
    """A dependent's definition naming relation `schema.old` as `new`: through its query where it
    has one, else where a name follows ON / FROM / INTO (CREATE INDEX, SINK ... FROM, ...)."""
    from piestream.frontend.parser import parse_one

    stmt = parse_one(definition)
    if isinstance(stmt, exp.Expression) or isinstance(getattr(stmt, "query", None), exp.Expression):
        return rename_references_text(definition, old, schema, new)
    return rename_name_tokens(definition, old, new, ("ON", "FROM", "INTO"))


def has_query(definition: str) -> bool:
    from piestream.frontend.parser import parse_one

    stmt = parse_one(definition)
    return isinstance(stmt, exp.Expression) or isinstance(getattr(stmt, "query", None), exp.Expression)


def drop_column_text(definition: str, column: str) -> str | None:
    """A CREATE TABLE without column `column`'s definition in its column list (None: no list,
    or the column is named elsewhere in it, e.g. a table constraint)."""
    toks = _tokens(definition)
    span = _column_list(toks)
    if span is None:
        return None
    open_i, close_i = span
    # the elements of the list: token index ranges between top-level commas
    elements: list[tuple[int, int]] = []
    depth, first = 0, open_i + 1
    for j in range(open_i + 1, close_i + 1):
        tt = toks[j].token_type
        if tt == TokenType.L_PAREN:
            depth += 1
        elif tt == TokenType.R_PAREN and depth:
            depth -= 1
        elif (tt == TokenType.COMMA and depth == 0) or j == close_i:
            elements.append((first, j - 1))
            first = j + 1
    hit = [
        k
        for k, (a, _) in enumerate(elements)
        if toks[a].token_type in _NAME_TOKENS and _folded(toks[a]) == column
    ]
    if len(hit) != 1:
        return None
    k = hit[0]
    a, b = elements[k]
    if any(
        t.token_type in _NAME_TOKENS and _folded(t) == column
        for m, (x, y) in enumerate(elements)
        if m != k
        for t in toks[x : y + 1]
    ):
        return None
    if len(elements) == 1:
        start, end = toks[a].start, toks[b].end
    elif k + 1 < len(elements):
        start, end = toks[a].start, toks[elements[k + 1][0]].start - 1
    else:
        start, end = toks[elements[k - 1][1]].end + 1, toks[b].end
    return _splice(definition, [(start, end, "")])


def references_column(definition: str, column: str) -> bool:
    """Whether a query (or a statement holding one) names `column` anywhere, or has a ``*``."""
    from piestream.frontend.parser import parse_one

    stmt = parse_one(definition)
    tree = stmt if isinstance(stmt, exp.Expression) else getattr(stmt, "query", None)
    if not isinstance(tree, exp.Expression):
        return True
    if any(True for _ in tree.find_all(exp.Star)):
        return True
    return any(c.name == column for c in tree.find_all(exp.Column))
