"""Query shapes of issue 14 part B for the differential generator (`sqlgen.QueryGen` calls these):
INTERSECT / EXCEPT [ALL], set-returning functions in the select list and in FROM (lateral),
window functions over ROWS / RANGE frames with lag / lead / first_value / last_value, and
DISTINCT ON.

Determinism, so that DuckDB's answer is the only right one: ROWS frames, lag / lead and
first / last values are ordered by every output column (rows that tie are identical), and their
arguments are output columns; RANGE frames include all peers, so any tie order gives the same
sums; DISTINCT ON orders by all output columns; generate_series bounds stay small.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlgen import TYPES, Column, E, Query, _sum_type, category, fmt

if TYPE_CHECKING:
    from sqlgen import QueryGen

_DIRS = ["", " DESC", " NULLS FIRST", " DESC NULLS LAST"]


def q_set_op(qg: QueryGen, depth: int) -> Query:
    """Two branches of one column list under INTERSECT / EXCEPT [ALL]."""
    r = qg.r
    types = [r.choice([t for t in TYPES if t != "double"]) for _ in range(r.randint(1, 2))]
    branches = []
    for _ in range(2):
        s = qg.src(depth)
        sc = qg.scope(s)
        exprs = [qg.g.expr(t, sc, 1) if qg.g.chance(0.5) else qg.g.leaf(t, sc) for t in types]
        pg, dk, _cols = qg.aliased(exprs)
        wp, wd = qg.where(sc, 0.4)
        branches.append((f"SELECT {pg} FROM {s.pg}{wp}", f"SELECT {dk} FROM {s.dk}{wd}"))
    op = r.choice(["INTERSECT", "INTERSECT ALL", "EXCEPT", "EXCEPT ALL"])
    (lp, ld), (rp, rd) = branches
    return Query(
        f"{lp} {op} {rp}",
        f"{ld} {op} {rd}",
        [Column(f"c{i}", t) for i, t in enumerate(types)],
        "set_op",
    )


def _small_int(qg: QueryGen, sc: list, d: int = 1) -> E:
    """An integer expression kept in -2..9 (series bounds must stay small)."""
    x = qg.g.expr("int", sc, d)
    return fmt("(({0}) % 5 + 3)", "int", x)


def q_srf(qg: QueryGen, depth: int) -> Query:
    """Set-returning functions in the select list (zipped to the longest) or in FROM (lateral)."""
    r = qg.r
    s = qg.src_named()
    sc = qg.scope(s)
    if qg.g.chance(0.5):
        items: list[tuple[E, str]] = []
        for _ in range(r.randint(1, 2)):
            kind = r.choice(["series", "range", "unnest"])
            if kind in ("series", "range"):
                lo, hi = _small_int(qg, sc, 0), _small_int(qg, sc)
                name = "generate_series" if kind == "series" else "range"
                items.append(
                    (E(f"{name}({lo.pg}, {hi.pg})", f"unnest({name}({lo.dk}, {hi.dk}))", "int"), "int")
                )
            else:
                t = r.choice(["int", "varchar", "bigint"])
                elems = [qg.g.expr(t, sc, 1) for _ in range(r.randint(1, 3))]
                pg = ", ".join(e.pg for e in elems)
                dk = ", ".join(e.dk for e in elems)
                items.append((E(f"unnest(ARRAY[{pg}])", f"unnest([{dk}])", t), t))
        plain = qg.select_list(sc, r.randint(1, 2))
        exprs = plain + [e for e, _ in items]
        pg, dk, cols = qg.aliased(exprs)
        wp, wd = qg.where(sc, 0.4)
        return Query(f"SELECT {pg} FROM {s.pg}{wp}", f"SELECT {dk} FROM {s.dk}{wd}", cols, "srf")
    # FROM: a function over each row of the table before it
    lo, hi = _small_int(qg, sc, 0), _small_int(qg, sc)
    ordinality = qg.g.chance(0.4)
    a = qg.g.alias("f")
    if ordinality:
        f_pg = f"generate_series({lo.pg}, {hi.pg}) WITH ORDINALITY AS {a}(v, n)"
        f_dk = f"generate_series({lo.dk}, {hi.dk}) WITH ORDINALITY AS {a}(v, n)"
        extra = [E.same(f"{a}.v", "int"), E.same(f"{a}.n", "bigint")]
    elif qg.g.chance(0.5):
        t = r.choice(["int", "varchar"])
        elems = [qg.g.expr(t, sc, 1) for _ in range(r.randint(1, 3))]
        f_pg = f"unnest(ARRAY[{', '.join(e.pg for e in elems)}]) AS {a}(v)"
        f_dk = f"unnest([{', '.join(e.dk for e in elems)}]) AS {a}(v)"
        extra = [E.same(f"{a}.v", t)]
    else:
        f_pg = f"generate_series({lo.pg}, {hi.pg}) AS {a}(v)"
        f_dk = f"generate_series({lo.dk}, {hi.dk}) AS {a}(v)"
        extra = [E.same(f"{a}.v", "int")]
    join = r.choice([", ", " CROSS JOIN "])
    pg, dk, cols = qg.aliased(qg.select_list(sc, r.randint(1, 2)) + extra)
    wp, wd = qg.where(sc, 0.3)
    return Query(
        f"SELECT {pg} FROM {s.pg}{join}{f_pg}{wp}", f"SELECT {dk} FROM {s.dk}{join}{f_dk}{wd}", cols, "srf"
    )


def _frame(qg: QueryGen, offsets: str) -> str:
    """ROWS frame text (`offsets`: the n of n PRECEDING / FOLLOWING)."""
    r = qg.r
    lo = r.choice(["UNBOUNDED PRECEDING", "{n} PRECEDING", "CURRENT ROW", "{n} PRECEDING"])
    hi = r.choice(["CURRENT ROW", "{n} FOLLOWING", "UNBOUNDED FOLLOWING", "{n} PRECEDING"])
    if lo == "CURRENT ROW" and hi.endswith("PRECEDING"):
        hi = "CURRENT ROW"
    if lo == "UNBOUNDED PRECEDING" and hi == "UNBOUNDED FOLLOWING" and qg.g.chance(0.5):
        return f"ROWS {offsets} PRECEDING"
    return f"ROWS BETWEEN {lo} AND {hi}".replace("{n}", offsets)


def _range_frame(qg: QueryGen, offset: str) -> str:
    """RANGE frame text with at least one offset bound (peers make any tie order equal)."""
    r = qg.r
    lo = r.choice(["UNBOUNDED PRECEDING", "CURRENT ROW", "{n} PRECEDING", "{n} PRECEDING", "{n} FOLLOWING"])
    hi = r.choice(["CURRENT ROW", "UNBOUNDED FOLLOWING", "{n} FOLLOWING", "{n} FOLLOWING"])
    if lo.endswith("FOLLOWING") and not hi.endswith("FOLLOWING"):
        hi = "UNBOUNDED FOLLOWING"
    if "{n}" not in lo + hi:
        lo = "{n} PRECEDING"
    return f"RANGE BETWEEN {lo} AND {hi}".replace("{n}", offset)


def q_window_frame(qg: QueryGen, depth: int) -> Query:
    """lag / lead / first_value / last_value and aggregates over frames, as in a select list."""
    r = qg.r
    s = qg.src(depth)
    sc = qg.scope(s)
    exprs = qg.select_list(sc, r.randint(2, 4))
    n_part = r.randint(0, len(exprs) - 1)
    part, rest = exprs[:n_part], exprs[n_part:]
    pg, dk, cols = qg.aliased(exprs)
    out_cols = list(cols)
    # a RANGE frame with offsets orders by one numeric or timestamp column
    range_col = next((i for i, e in enumerate(rest) if e.t in ("int", "bigint", "timestamp")), None)
    calls_pg, calls_dk = [], []
    for k in range(r.randint(1, 3)):
        key = rest[range_col] if range_col is not None and qg.g.chance(0.5) else None
        if key is not None:
            over_order = [(key, r.choice(["", " DESC"]))]
            offset = "INTERVAL '20 minutes'" if key.t == "timestamp" else str(r.randint(0, 3))
            frame = _range_frame(qg, offset)
            fn_kinds = ["sum", "count", "min", "max", "avg", "count_star"]
        else:
            over_order = [(e, r.choice(_DIRS)) for e in rest]
            frame = _frame(qg, str(r.randint(0, 3)))
            fn_kinds = ["sum", "count", "min", "max", "avg", "count_star"]
            fn_kinds += ["lag", "lead", "first_value", "last_value"]
        kind = r.choice(fn_kinds)
        nums = [e for e in exprs if category(e.t) == "num" and e.t != "double"]
        ordered = [e for e in exprs if e.t != "bool"]  # PostgreSQL has no min / max of booleans
        if kind in ("sum", "avg"):
            pool = nums
        elif kind in ("min", "max"):
            pool = ordered
        else:
            pool = exprs
        if not pool:
            kind, pool = "count", exprs
        arg = r.choice(pool)
        t = {"count": "bigint", "count_star": "bigint", "avg": "numeric"}.get(kind, arg.t)
        if kind == "sum":
            t = _sum_type(arg.t)
        if kind in ("lag", "lead"):
            n = r.randint(1, 2)
            default = qg.g.literal(arg.t) if qg.g.chance(0.4) else None
            body_pg = f"{kind}({arg.pg}, {n}" + (f", {default.pg}" if default else "") + ")"
            body_dk = f"{kind}({arg.dk}, {n}" + (f", {default.dk}" if default else "") + ")"
            frame = ""
        elif kind == "count_star":
            body_pg = body_dk = "count(*)"
        else:
            body_pg, body_dk = f"{kind}({arg.pg})", f"{kind}({arg.dk})"
        for d, bucket, body in (("pg", calls_pg, body_pg), ("dk", calls_dk, body_dk)):
            p = f"PARTITION BY {', '.join(getattr(e, d) for e in part)} " if part else ""
            o = ", ".join(getattr(e, d) + x for e, x in over_order)
            bucket.append(f"{body} OVER ({p}ORDER BY {o}{' ' + frame if frame else ''}) AS w{k}")
        out_cols.append(Column(f"w{k}", t))
    wp, wd = qg.where(sc, 0.3)
    return Query(
        f"SELECT {pg}, {', '.join(calls_pg)} FROM {s.pg}{wp}",
        f"SELECT {dk}, {', '.join(calls_dk)} FROM {s.dk}{wd}",
        out_cols,
        "window_frame",
    )


def q_distinct_on(qg: QueryGen, depth: int) -> Query:
    """SELECT DISTINCT ON (leading output columns) ... ORDER BY them, then every other column."""
    r = qg.r
    s = qg.src(depth)
    sc = qg.scope(s)
    exprs = qg.select_list(sc, r.randint(2, 4))
    pg, dk, cols = qg.aliased(exprs)
    n_on = r.randint(1, len(cols) - 1)
    on = ", ".join(c.name for c in cols[:n_on])
    order = qg.order_by([c.name for c in cols])
    wp, wd = qg.where(sc, 0.3)
    limit = f" LIMIT {r.randint(1, 4)}" if qg.g.chance(0.2) else ""
    return Query(
        f"SELECT DISTINCT ON ({on}) {pg} FROM {s.pg}{wp} ORDER BY {order}{limit}",
        f"SELECT DISTINCT ON ({on}) {dk} FROM {s.dk}{wd} ORDER BY {order}{limit}",
        cols,
        "distinct_on",
    )
