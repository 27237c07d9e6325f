"""PostgreSQL text form of STRUCT (record) and LIST (array) values.

Output is record_out's ``(1,foo,)`` and array_out's ``{1,2,NULL}``, quoting what needs quotes;
input is record_in's and array_in's syntax, with PostgreSQL's "malformed ... literal" errors.
Fields and elements are written and read by the text form of their own type, which the caller
passes in (`piestream.common.text` dispatches on the type, including back to this module for
nested composites).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from piestream.common.errors import InvalidInput
from piestream.common.scalar import Datum
from piestream.common.text_syntax import WS
from piestream.common.types import DataType, TypeKind

FormatFn = Callable[[Datum, DataType], str]
ParseFn = Callable[[str, DataType], Datum]

# -- output -------------------------------------------------------------------------------------

#: record_out quotes a field holding any of these (or an empty string).
_RECORD_QUOTE = frozenset('",()\\' + WS)
#: array_out quotes an element holding any of these (or an empty string, or NULL in any case).
_ARRAY_QUOTE = frozenset('",{}\\' + WS)


def format_struct(v: Any, t: DataType, format_field: FormatFn) -> str:
    """Record text ``(1,foo,)``: NULL fields are empty, others quoted as record_out does.

    Inside quotes record_out doubles ``"`` and ``\\`` (``"a""b"``), unlike array_out.
    """
    values = [v.get(f.name) for f in t.fields] if isinstance(v, Mapping) else list(v)
    parts = []
    for value, field in zip(values, t.fields, strict=True):
        if value is None:
            parts.append("")
            continue
        text = format_field(value, field.data_type)
        if text == "" or not _RECORD_QUOTE.isdisjoint(text):
            text = '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'
        parts.append(text)
    return "(" + ",".join(parts) + ")"


def format_list(v: Any, t: DataType, format_elem: FormatFn) -> str:
    """Array text ``{1,2,NULL}``; nested lists print their braces unquoted (``{{1,2},{3}}``)."""
    elem = t.elem
    assert elem is not None
    parts = []
    for value in v:
        if value is None:
            parts.append("NULL")
            continue
        text = format_elem(value, elem)
        if elem.kind is not TypeKind.LIST and (
            text == "" or text.lower() == "null" or not _ARRAY_QUOTE.isdisjoint(text)
        ):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parts.append(text)
    return "{" + ",".join(parts) + "}"


# -- input --------------------------------------------------------------------------------------


class _Scanner:
    """A cursor over composite text (record or array literal) that reports malformed input."""

    def __init__(self, text: str, what: str) -> None:
        self.text = text
        self.pos = 0
        self.what = what

    def error(self, detail: str) -> InvalidInput:
        return InvalidInput(f'malformed {self.what} literal: "{self.text}"', detail=detail)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        """The next character; running out means the literal ended too early."""
        if self.pos >= len(self.text):
            raise self.error("Unexpected end of input.")
        self.pos += 1
        return self.text[self.pos - 1]

    def skip_blanks(self) -> None:
        while self.peek() and self.peek() in WS:
            self.pos += 1


def parse_struct(s: str, t: DataType, parse_field: ParseFn) -> dict[str, Datum]:
    """record_in: ``(f1,f2,...)``; an empty unquoted field is NULL, ``""`` is an empty string.

    Quoted text takes ``\\x`` and ``""`` escapes; blanks inside the parentheses are kept and left
    to each field's own input function.
    """
    sc = _Scanner(s, "record")
    sc.skip_blanks()
    if sc.peek() != "(":
        raise sc.error("Missing left parenthesis.")
    sc.pos += 1
    result: dict[str, Datum] = {}
    for i, field in enumerate(t.fields):
        if i > 0:
            if sc.peek() != ",":
                raise sc.error("Too few columns.")
            sc.pos += 1
        if sc.peek() in (",", ")"):
            result[field.name] = None
            continue
        buf: list[str] = []
        in_quotes = False
        while in_quotes or sc.peek() not in (",", ")"):
            ch = sc.take()
            if ch == "\\":
                buf.append(sc.take())
            elif ch == '"':
                if in_quotes and sc.peek() == '"':
                    buf.append(sc.take())
                else:
                    in_quotes = not in_quotes
            else:
                buf.append(ch)
        result[field.name] = parse_field("".join(buf), field.data_type)
    if sc.peek() != ")":
        raise sc.error("Too many columns." if sc.peek() == "," else "Unexpected end of input.")
    sc.pos += 1
    sc.skip_blanks()
    if sc.peek():
        raise sc.error("Junk after right parenthesis.")
    return result


def parse_list(s: str, t: DataType, parse_elem: ParseFn) -> list[Datum]:
    """array_in: ``{e1,e2,...}`` with NULL, quoted elements and nested braces for lists of lists."""
    sc = _Scanner(s, "array")
    sc.skip_blanks()
    if sc.peek() != "{":
        raise sc.error('Array value must start with "{" or dimension information.')
    result = _read_array(sc, t, parse_elem)
    sc.skip_blanks()
    if sc.peek():
        raise sc.error("Junk after closing right brace.")
    return result


def _read_array(sc: _Scanner, t: DataType, parse_elem: ParseFn) -> list[Datum]:
    """The array starting at the scanner's ``{``; leaves the scanner after its ``}``."""
    elem = t.elem
    assert elem is not None
    sc.pos += 1
    sc.skip_blanks()
    result: list[Datum] = []
    if sc.peek() == "}":
        sc.pos += 1
        return result
    while True:
        sc.skip_blanks()
        if sc.peek() == "{" and elem.kind is TypeKind.LIST:
            result.append(_read_array(sc, elem, parse_elem))
        else:
            text, literal = _read_element(sc)
            is_null = not literal and text.lower() == "null"
            result.append(None if is_null else parse_elem(text, elem))
        sc.skip_blanks()
        ch = sc.take()
        if ch == "}":
            return result
        if ch != ",":
            raise sc.error(f'Unexpected "{ch}" character.')


def _read_element(sc: _Scanner) -> tuple[str, bool]:
    """One scalar element's text, and whether any of it was quoted or escaped (so not NULL).

    Unquoted trailing blanks are dropped; quoted or escaped characters are always kept.
    """
    buf: list[str] = []
    keep = 0  # buf[:keep] ends at the last character that is not an unquoted blank
    literal = False
    in_quotes = False
    while in_quotes or sc.peek() not in (",", "}"):
        ch = sc.take()
        if ch == "\\":
            buf.append(sc.take())
            literal = True
        elif ch == '"':
            in_quotes = not in_quotes
            literal = True
        elif ch == "{" and not in_quotes:
            raise sc.error('Unexpected "{" character.')
        else:
            buf.append(ch)
            if ch in WS and not in_quotes:
                continue  # an unquoted blank is kept only if more text follows it
        keep = len(buf)
    if not buf and not literal:
        raise sc.error(f'Unexpected "{sc.peek()}" character.')
    return "".join(buf[:keep]), literal
