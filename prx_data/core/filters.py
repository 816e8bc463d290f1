"""Lance filters as pyarrow compute expressions: values stay data, never spliced into SQL.

Lance scanners (``to_table``, ``scanner``, ``count_rows``, ``delete``) take a
``pyarrow.compute.Expression`` as ``filter``; it reaches Lance as Substrait, so no value needs
quoting or escaping, whatever quotes, backslashes or characters it holds. Only pyarrow (which
GPU workers have too) is needed.

``sql_string`` remains for the one thing Substrait cannot carry to Lance: a LIKE pattern
(the explorer's word search).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

Expr: TypeAlias = pc.Expression


def equals(column: str, value: object) -> Expr:
    return pc.field(column) == pc.scalar(value)


def one_of(column: str, values: Iterable[object]) -> Expr:
    """``column IN values``; an empty set matches nothing."""
    values = list(values)
    if not values:
        return pc.scalar(False)
    return pc.field(column).isin(pa.array(values))


def differs(column: str, value: object) -> Expr:
    """Null or another value (SQL's ``col IS NULL OR col != value``)."""
    return pc.field(column).is_null() | (pc.field(column) != pc.scalar(value))


def is_set(column: str) -> Expr:
    return pc.field(column).is_valid()


def all_of(*exprs: Expr) -> Expr:
    return functools.reduce(operator.and_, exprs)


def any_of(*exprs: Expr) -> Expr:
    return functools.reduce(operator.or_, exprs)


STATUS_OK = equals("status", "ok")


def sql_string(value: str) -> str:
    """A SQL string literal (single quotes doubled), for LIKE patterns only."""
    return "'" + value.replace("'", "''") + "'"
