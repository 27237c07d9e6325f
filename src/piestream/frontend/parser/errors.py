"""Turning sqlglot's tokenizer and parser failures into PostgreSQL-style syntax errors.

PostgreSQL reports a syntax error as ``syntax error at or near "<token>"`` (or ``at end of input``)
with the 1-based character position of that token in the query string; psql draws its caret from
it. sqlglot's own errors carry line/column and a description, so the parser records the
offending token itself (`TokenFailure`) and this module renders it.
"""

from __future__ import annotations

import re

from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from piestream.common.errors import SyntaxError_

_WORD_TOKEN = re.compile(r"[A-Za-z_]\w*(\s+[A-Za-z_]\w*)+")

#: Tokens whose text is a literal, shown whole (PostgreSQL's tokens never contain spaces otherwise).
_LITERAL_TOKENS = frozenset(
    {
        TokenType.STRING,
        TokenType.IDENTIFIER,
        TokenType.BYTE_STRING,
        TokenType.HEREDOC_STRING,
        TokenType.BIT_STRING,
        TokenType.HEX_STRING,
        TokenType.NATIONAL_STRING,
        TokenType.UNICODE_STRING,
    }
)


class TokenFailure(ParseError):
    """A sqlglot ParseError that remembers the token it blames (None: the statement ended early).

    It stays a ParseError so sqlglot's speculative parsing (`_try_parse`) still catches it.
    """

    def __init__(self, message: str, token: Token | None) -> None:
        super().__init__(message)
        self.token = token


def syntax_error(sql: str, failure: TokenFailure, terminator: Token | None) -> SyntaxError_:
    """The error PostgreSQL would report for `failure` in `sql`.

    `terminator` is the ``;`` that ended the failing statement, if any: running out of tokens
    before it is an error "at or near ";"", running out at the end of the text is "at end of input".
    """
    token = failure.token
    if token is None:
        token = terminator
    if token is None:
        return SyntaxError_("syntax error at end of input", position=len(sql) + 1)
    text = sql[token.start : token.end + 1]
    if token.token_type not in _LITERAL_TOKENS and _WORD_TOKEN.fullmatch(text):
        text = text.split()[0]  # sqlglot merges "GROUP BY", "PRIMARY KEY", ... into one token
    return SyntaxError_(f'syntax error at or near "{text}"', position=token.start + 1)


def lexical_error(sql: str, start: int | None, unterminated: bool) -> SyntaxError_:
    """The error for text the tokenizer rejects at 0-based `start` (None: unknown).

    `unterminated` says the tokenizer ran out of text inside a literal or comment.
    """
    if start is None or start >= len(sql):
        return SyntaxError_("syntax error at end of input", position=len(sql) + 1)
    rest = sql[start:]
    what = "syntax error"
    if unterminated:
        head = rest[:3].upper()
        if head.startswith("/*"):
            what = "unterminated /* comment"
        elif head.startswith(('"', 'U&"')):
            what = "unterminated quoted identifier"
        elif head.startswith("$"):
            what = "unterminated dollar-quoted string"
        else:
            what = "unterminated quoted string"
    else:
        rest = rest.split(None, 1)[0] if rest.strip() else rest
    return SyntaxError_(f'{what} at or near "{rest}"', position=start + 1)
