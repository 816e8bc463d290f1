"""The ``where`` predicate of an ablation view: a small filter language over a source's row
columns, parsed here into a ``pyarrow.compute`` expression (never evaluated as code).

Grammar (keywords are case-insensitive)::

    expr  := term (OR term)*
    term  := factor (AND factor)*
    factor:= NOT factor | '(' expr ')' | test
    test  := column op literal | column IS [NOT] NULL | column [NOT] IN '(' literal (',' literal)* ')'
    op    := = | == | != | <> | < | <= | > | >=
    literal := integer | decimal | 'single-quoted string' | TRUE | FALSE

A row whose predicate is null (a null column, a source without the column) is not kept, as SQL's
WHERE does.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op><=|>=|==|!=|<>|=|<|>)|(?P<punct>[(),])|(?P<word>[A-Za-z_][A-Za-z0-9_]*))"
)
_KEYWORDS = {"and", "or", "not", "is", "null", "in", "true", "false"}
_OPS = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class PredicateError(ValueError):
    """A predicate that does not parse; the message says where."""


@dataclass
class Predicate:
    text: str
    expression: pc.Expression
    columns: set[str] = field(default_factory=set)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise PredicateError(f"cannot read {text[pos:].strip()[:20]!r} at character {pos + 1}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "word" and value.lower() in _KEYWORDS:
            kind, value = "kw", value.lower()
        out.append((kind, value))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokens(text)
        self.pos = 0
        self.columns: set[str] = set()

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, kind: str, value: str | None = None) -> str:
        token = self.peek()
        if token is None or token[0] != kind or (value is not None and token[1] != value):
            wanted = value or kind
            raise PredicateError(f"expected {wanted!r}, found {token[1] if token else 'the end'!r}")
        self.pos += 1
        return token[1]

    def accept(self, kind: str, value: str) -> bool:
        token = self.peek()
        if token == (kind, value):
            self.pos += 1
            return True
        return False

    def expr(self) -> pc.Expression:
        left = self.term()
        while self.accept("kw", "or"):
            left = left | self.term()
        return left

    def term(self) -> pc.Expression:
        left = self.factor()
        while self.accept("kw", "and"):
            left = left & self.factor()
        return left

    def factor(self) -> pc.Expression:
        if self.accept("kw", "not"):
            return ~self.factor()
        if self.accept("punct", "("):
            inner = self.expr()
            self.take("punct", ")")
            return inner
        return self.test()

    def literal(self) -> object:
        token = self.peek()
        if token is None:
            raise PredicateError("expected a value, found the end")
        kind, value = token
        self.pos += 1
        if kind == "num":
            return float(value) if "." in value else int(value)
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "kw" and value in ("true", "false"):
            return value == "true"
        raise PredicateError(f"expected a value, found {value!r}")

    def test(self) -> pc.Expression:
        name = self.take("word")
        self.columns.add(name)
        column = pc.field(name)
        if self.accept("kw", "is"):
            negate = self.accept("kw", "not")
            self.take("kw", "null")
            return column.is_valid() if negate else column.is_null()
        negate = self.accept("kw", "not")
        if self.accept("kw", "in"):
            self.take("punct", "(")
            values = [self.literal()]
            while self.accept("punct", ","):
                values.append(self.literal())
            self.take("punct", ")")
            # SQL's IN: null for a null value (pyarrow's is_in says False), so NOT IN keeps no null.
            found = pc.if_else(column.is_null(), pa.scalar(None, pa.bool_()), column.isin(values))
            return ~found if negate else found
        if negate:
            raise PredicateError(f"expected 'IN' after 'NOT' following {name!r}")
        token = self.peek()
        if token is None or token[0] != "op":
            raise PredicateError(f"expected a comparison after {name!r}, found {token[1] if token else 'the end'!r}")
        self.pos += 1
        return _OPS[token[1]](column, pc.scalar(self.literal()))


def parse_predicate(text: str) -> Predicate:
    """Parse ``text``; ``PredicateError`` names what does not parse."""
    if not text.strip():
        raise PredicateError("empty predicate")
    parser = _Parser(text)
    expression = parser.expr()
    if parser.peek() is not None:
        raise PredicateError(f"unexpected {parser.peek()[1]!r} after a complete predicate")  # type: ignore[index]
    return Predicate(text, expression, parser.columns)


__all__ = ["Predicate", "PredicateError", "parse_predicate"]
