"""Roles, relation owners and privileges, kept in the meta store (namespaces of its kv table).

Additive to the catalog: a relation's owner and its grants are records keyed by relation id,
next to (not inside) the relation's catalog entry. A role's password is a SCRAM-SHA-256 verifier
string (``SCRAM-SHA-256$iter:salt$StoredKey:ServerKey``), never the password. Each record is
JSON with a format version. A relation without an owner record (created before roles existed)
belongs to the bootstrap superuser.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from piestream.meta.store import MetaStore

FORMAT_VERSION = 1
_ROLE_NS = "role"
_OWNER_NS = "rel_owner"
_ACL_NS = "rel_acl"
_SEQ_NS = "role_seq"

BOOTSTRAP_SUPERUSER = "root"  # RisingWave's default superuser
BOOTSTRAP_OID = 10  # PostgreSQL's bootstrap superuser oid
PUBLIC = "public"  # the pseudo-role every role belongs to


@dataclass(frozen=True)
class Role:
    oid: int
    name: str
    superuser: bool = False
    login: bool = True
    createdb: bool = False
    createrole: bool = False
    password: str | None = None  # a SCRAM verifier, or None


@dataclass
class _State:
    roles: dict[str, Role] = field(default_factory=dict)
    owners: dict[int, int] = field(default_factory=dict)  # relation id -> role oid
    acls: dict[int, dict[int, frozenset[str]]] = field(default_factory=dict)  # rel -> grantee oid -> privs


def _decode(raw: bytes | str) -> dict[str, Any]:
    d = json.loads(raw)
    if not isinstance(d, dict) or d.get("v") != FORMAT_VERSION:
        raise ValueError(f"role record of an unknown format: {str(raw)[:80]}")
    return d


class RoleCatalog:
    """The roles of one database and who may do what; thread-safe, cached in memory."""

    def __init__(self, store: MetaStore) -> None:
        self.store = store
        self._lock = threading.RLock()
        self._s = _State()
        for _, raw in store.scan(_ROLE_NS):
            d = _decode(raw)
            d.pop("v")
            r = Role(**d)
            self._s.roles[r.name] = r
        for key, raw in store.scan(_OWNER_NS):
            self._s.owners[int(key)] = int(_decode(raw)["owner"])
        for key, raw in store.scan(_ACL_NS):
            acl = _decode(raw)["acl"]
            self._s.acls[int(key)] = {int(g): frozenset(p) for g, p in acl.items()}
        if BOOTSTRAP_SUPERUSER not in self._s.roles:
            self._put(
                Role(BOOTSTRAP_OID, BOOTSTRAP_SUPERUSER, superuser=True, createdb=True, createrole=True)
            )

    # -- roles ----------------------------------------------------------------------------------
    def _put(self, role: Role) -> None:
        self.store.put(_ROLE_NS, role.name, json.dumps({"v": FORMAT_VERSION, **asdict(role)}))
        self._s.roles[role.name] = role

    def get(self, name: str) -> Role | None:
        return self._s.roles.get(name)

    def by_oid(self, oid: int) -> Role | None:
        return next((r for r in self._s.roles.values() if r.oid == oid), None)

    def roles(self) -> list[Role]:
        return sorted(self._s.roles.values(), key=lambda r: r.oid)

    def create(self, role: Role) -> Role:
        """Add a role (its oid is assigned here); the caller checked the name is free."""
        with self._lock, self.store.transaction():
            raw = self.store.get(_SEQ_NS, "next")
            oid = max(int(raw) if raw is not None else 16384, *(r.oid + 1 for r in self._s.roles.values()))
            self.store.put(_SEQ_NS, "next", str(oid + 1))
            role = replace(role, oid=oid)
            self._put(role)
            return role

    def update(self, old_name: str, role: Role) -> None:
        with self._lock, self.store.transaction():
            if role.name != old_name:
                self.store.delete(_ROLE_NS, old_name)
                self._s.roles.pop(old_name, None)
            self._put(role)

    def drop(self, name: str) -> None:
        with self._lock, self.store.transaction():
            self.store.delete(_ROLE_NS, name)
            self._s.roles.pop(name, None)

    def seed(self, users: dict[str, str]) -> None:
        """The password file's users (name -> SCRAM verifier text) at server start: a new one
        becomes a superuser (before roles, each of them could do everything); an existing one
        keeps its attributes and takes the file's password, so the file stays what logs them in."""
        with self._lock, self.store.transaction():
            for name, verifier in users.items():
                r = self._s.roles.get(name)
                if r is None:
                    self.create(
                        Role(0, name, superuser=True, createdb=True, createrole=True, password=verifier)
                    )
                elif r.password != verifier:
                    self._put(replace(r, password=verifier))

    # -- ownership and privileges ---------------------------------------------------------------
    def owner(self, relation_id: int) -> int:
        return self._s.owners.get(relation_id, BOOTSTRAP_OID)

    def owners(self) -> dict[int, int]:
        """Relation id -> owner oid, for the relations with an owner record."""
        return dict(self._s.owners)

    def owned_by(self, oid: int) -> list[int]:
        return [rel for rel, o in self._s.owners.items() if o == oid]

    def set_owner(self, relation_id: int, oid: int) -> None:
        with self._lock:
            self.store.put(_OWNER_NS, str(relation_id), json.dumps({"v": FORMAT_VERSION, "owner": oid}))
            self._s.owners[relation_id] = oid

    def privileges(self, relation_id: int, oid: int) -> frozenset[str]:
        """What `oid` was granted on the relation (directly or through PUBLIC)."""
        acl = self._s.acls.get(relation_id, {})
        return acl.get(oid, frozenset()) | acl.get(0, frozenset())

    def grants(self, relation_id: int) -> dict[int, frozenset[str]]:
        return dict(self._s.acls.get(relation_id, {}))

    def all_grants(self) -> dict[int, dict[int, frozenset[str]]]:
        return {rel: dict(acl) for rel, acl in self._s.acls.items()}

    def granted_to(self, oid: int) -> list[int]:
        return [rel for rel, acl in self._s.acls.items() if acl.get(oid)]

    def change_grants(
        self, relation_id: int, grantees: list[int], privs: frozenset[str], revoke: bool
    ) -> None:
        """Add (or, with `revoke`, remove) `privs` for each grantee (oid 0 = PUBLIC)."""
        with self._lock:
            acl = dict(self._s.acls.get(relation_id, {}))
            for g in grantees:
                now = acl.get(g, frozenset())
                now = now - privs if revoke else now | privs
                if now:
                    acl[g] = now
                else:
                    acl.pop(g, None)
            self._write_acl(relation_id, acl)

    def _write_acl(self, relation_id: int, acl: dict[int, frozenset[str]]) -> None:
        if acl:
            body = {"v": FORMAT_VERSION, "acl": {str(g): sorted(p) for g, p in acl.items()}}
            self.store.put(_ACL_NS, str(relation_id), json.dumps(body))
            self._s.acls[relation_id] = acl
        else:
            self.store.delete(_ACL_NS, str(relation_id))
            self._s.acls.pop(relation_id, None)

    def known_relations(self) -> set[int]:
        """Relations with an owner or grant record."""
        return set(self._s.owners) | set(self._s.acls)

    def forget_relation(self, relation_id: int) -> None:
        """A dropped relation: its owner and grants go with it."""
        with self._lock:
            self.store.delete(_OWNER_NS, str(relation_id))
            self._s.owners.pop(relation_id, None)
            self._write_acl(relation_id, {})
