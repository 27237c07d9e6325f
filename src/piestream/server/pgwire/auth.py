"""Password authentication: SCRAM-SHA-256 (RFC 5802 / RFC 7677, as PostgreSQL does it) and md5.

Passwords are configured in clear text (a password file or the `auth` dict) or, for SCRAM, as a
PostgreSQL verifier ``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``; the file's users
seed the role catalog (`piestream.meta.roles`), which keeps only verifiers, and the roles'
verifiers (CREATE / ALTER USER ... PASSWORD) are what SCRAM checks. With md5, a user whose only
password is a SCRAM verifier is asked for SCRAM instead, as PostgreSQL does. No channel binding
(SCRAM-SHA-256-PLUS is not offered), so clients send ``n,,`` or ``y,,``. Failures all read the same
(``password authentication failed for user "x"``, 28P01) so a client cannot probe which users
exist; `LoginThrottle` slows down repeated failures from one host.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
import unicodedata
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from piestream.common.errors import PiestreamError

SCRAM = "scram-sha-256"
MD5 = "md5"
METHODS = (SCRAM, MD5)
SCRAM_ITERATIONS = 4096


class AuthFailed(PiestreamError):
    sqlstate = "28P01"


def auth_failed(user: str) -> AuthFailed:
    return AuthFailed(f'password authentication failed for user "{user}"')


def _saslprep(password: str) -> str:
    """PostgreSQL is lenient: it normalizes with NFKC and falls back to the raw bytes."""
    try:
        return unicodedata.normalize("NFKC", password)
    except Exception:  # pragma: no cover - normalize only fails on non-str
        return password


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


@dataclass(frozen=True)
class ScramVerifier:
    """What the server stores for a SCRAM user (never the password itself)."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(
        cls, password: str, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS
    ) -> ScramVerifier:
        salt = salt or secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", _saslprep(password).encode("utf-8"), salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        return cls(iterations, salt, hashlib.sha256(client_key).digest(), _hmac(salted, b"Server Key"))

    def matches(self, password: str) -> bool:
        """Whether `password` is the one this verifier was made from (HTTP logins)."""
        other = ScramVerifier.from_password(password, self.salt, self.iterations)
        return hmac.compare_digest(other.stored_key, self.stored_key)

    def text(self) -> str:
        """PostgreSQL's text form (what pg_authid.rolpassword holds)."""
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
        return (
            f"SCRAM-SHA-256${self.iterations}:{b64(self.salt)}${b64(self.stored_key)}:{b64(self.server_key)}"
        )

    @classmethod
    def parse(cls, text: str) -> ScramVerifier | None:
        """A PostgreSQL ``SCRAM-SHA-256$iter:salt$stored:server`` string, or None."""
        if not text.startswith("SCRAM-SHA-256$"):
            return None
        try:
            _, params, keys = text.split("$")
            it, salt = params.split(":")
            stored, server = keys.split(":")
            return cls(int(it), base64.b64decode(salt), base64.b64decode(stored), base64.b64decode(server))
        except ValueError:
            return None


def _parse_attrs(msg: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in msg.split(","):
        if len(part) >= 2 and part[1] == "=":
            out.setdefault(part[0], part[2:])
    return out


class ScramExchange:
    """The server side of one SCRAM-SHA-256 exchange (client-first -> server-first -> final)."""

    def __init__(self, user: str, verifier: ScramVerifier | None) -> None:
        self.user = user
        # an unknown user still gets a full exchange with a made-up verifier, then fails
        self.verifier = verifier or ScramVerifier.from_password(secrets.token_hex(16))
        self.known = verifier is not None
        self.client_first_bare = ""
        self.server_first = ""
        self.nonce = ""

    def server_first_message(self, client_first: str) -> str:
        # gs2 header: "n,," (no channel binding) or "y,," (client could, server cannot)
        if client_first.startswith("p="):
            raise AuthFailed("channel binding is not supported", sqlstate="08P01")
        parts = client_first.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise AuthFailed("malformed SCRAM message", sqlstate="08P01")
        self.client_first_bare = parts[2]
        attrs = _parse_attrs(self.client_first_bare)
        client_nonce = attrs.get("r")
        if not client_nonce:
            raise AuthFailed("malformed SCRAM message (no nonce)", sqlstate="08P01")
        self.nonce = client_nonce + base64.b64encode(secrets.token_bytes(18)).decode("ascii")
        salt = base64.b64encode(self.verifier.salt).decode("ascii")
        self.server_first = f"r={self.nonce},s={salt},i={self.verifier.iterations}"
        return self.server_first

    def server_final_message(self, client_final: str) -> str:
        """Verify the client's proof; the returned ``v=`` message proves the server knows the key."""
        attrs = _parse_attrs(client_final)
        if attrs.get("r") != self.nonce or "p" not in attrs or "c" not in attrs:
            raise auth_failed(self.user)
        without_proof = client_final[: client_final.rindex(",p=")]
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(attrs["p"], validate=True)
        except ValueError:
            raise auth_failed(self.user) from None
        signature = _hmac(self.verifier.stored_key, auth_message)
        if len(proof) != len(signature):
            raise auth_failed(self.user)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not self.known or not hmac.compare_digest(
            hashlib.sha256(client_key).digest(), self.verifier.stored_key
        ):
            raise auth_failed(self.user)
        server_signature = _hmac(self.verifier.server_key, auth_message)
        return "v=" + base64.b64encode(server_signature).decode("ascii")


def md5_expected(user: str, password: str, salt: bytes) -> str:
    """What a client sends for md5: ``"md5" + md5(md5(password + user).hex + salt).hex``."""
    inner = hashlib.md5((password + user).encode("utf-8")).hexdigest()
    return "md5" + hashlib.md5(inner.encode("ascii") + salt).hexdigest()


class Authenticator:
    """The configured method and users: ``{"method": ..., "users": {name: password}}``.

    `lookup` (the role catalog's) gives a user's current SCRAM verifier text; without it the
    users given here are the only ones."""

    def __init__(
        self, method: str, users: dict[str, str], lookup: Callable[[str], str | None] | None = None
    ) -> None:
        method = method.lower()
        if method not in METHODS:
            raise ValueError(f"unknown authentication method {method!r} (use one of {', '.join(METHODS)})")
        self.method = method
        self.passwords = {u: p for u, p in users.items() if ScramVerifier.parse(p) is None}
        self.verifiers: dict[str, ScramVerifier] = {}
        if method == SCRAM:
            for u, p in users.items():
                self.verifiers[u] = ScramVerifier.parse(p) or ScramVerifier.from_password(p)
        elif len(self.passwords) != len(users):
            raise ValueError("md5 authentication needs clear-text passwords, not SCRAM verifiers")

        self.lookup = lookup

    def verifier(self, user: str) -> ScramVerifier | None:
        if self.lookup is not None:
            text = self.lookup(user)
            return ScramVerifier.parse(text) if text else None
        return self.verifiers.get(user)

    def uses_scram(self, user: str) -> bool:
        """Whether this user's exchange is SCRAM (md5 needs the clear-text password)."""
        return self.method == SCRAM or user not in self.passwords

    def scram(self, user: str) -> ScramExchange:
        return ScramExchange(user, self.verifier(user))

    def check_md5(self, user: str, salt: bytes, response: str) -> None:
        password = self.passwords.get(user)
        if password is None or not hmac.compare_digest(md5_expected(user, password, salt), response):
            raise auth_failed(user)


def read_password_file(path: str) -> dict[str, str]:
    """``user:password`` per line (``#`` comments and blank lines ignored)."""
    users: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if ":" not in line:
                raise ValueError(f"{path}:{n}: expected user:password")
            user, password = line.split(":", 1)
            users[user.strip()] = password
    return users


class LoginThrottle:
    """Failed logins per client host in a sliding window: after `free` failures, each further
    one waits longer before its error is sent (doubling from `base` up to `cap` seconds), so
    guessing passwords costs time; a success does not reset it (a guesser may know one user)."""

    def __init__(self, window: float = 60.0, free: int = 3, base: float = 0.25, cap: float = 5.0) -> None:
        self.window, self.free, self.base, self.cap = window, free, base, cap
        self._fails: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def failed(self, host: str, now: float | None = None) -> tuple[int, float]:
        """Record a failure; (failures in the window, seconds to wait before answering)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            q = self._fails.setdefault(host, deque())
            q.append(now)
            while q and q[0] <= now - self.window:
                q.popleft()
            n = len(q)
            if len(self._fails) > 10_000:  # many hosts: forget the quiet ones
                for h in [h for h, d in self._fails.items() if not d or d[-1] <= now - self.window]:
                    del self._fails[h]
        extra = n - self.free
        return n, 0.0 if extra <= 0 else min(self.cap, self.base * 2 ** (extra - 1))
