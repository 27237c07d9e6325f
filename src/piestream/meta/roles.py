"""Roles, relation owners and privileges, kept in the meta store (namespaces of its kv table).

Additive to the catalog: a relation's owner and its grants are records keyed by relation id,
next to (not inside) the relation's catalog entry. A role's password is a SCRAM-SHA-256 verifier
string (``SCRAM-SHA-256$iter:salt$StoredKey:ServerKey``), never the password. Each record is
JSON with a format version. A relation without an owner record (created before roles existed)
belongs to the bootstrap superuser.

Schemas have the same two records, keyed by schema name (namespaces ``schema_owner`` and
``schema_acl``). ``public`` belongs to the bootstrap superuser and, as in PostgreSQL 15, grants
PUBLIC only USAGE; a data directory whose roles predate schema privileges (non-superusers that could
create in public) keeps PostgreSQL 14's ``public`` (USAGE and CREATE for PUBLIC), as pg_upgrade
keeps an old cluster's ACL. That choice is written once, at the first open.
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
_SCHEMA_OWNER_NS = "schema_owner"  # schema name -> owner oid
_SCHEMA_ACL_NS = "schema_acl"  # schema name -> {grantee oid: [USAGE, CREATE]}

BOOTSTRAP_SUPERUSER = "root"  # RisingWave's default superuser
BOOTSTRAP_OID = 10  # PostgreSQL's bootstrap superuser oid
PUBLIC = "public"  # the pseudo-role every role belongs to
PUBLIC_SCHEMA = "public"
#: what PUBLIC may do in schema public in a new data directory (PostgreSQL 15: no CREATE)
PUBLIC_SCHEMA_DEFAULT = frozenset({"USAGE"})
SCHEMA_PRIVILEGES = ("USAGE", "CREATE")


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
    schema_owners: dict[str, int] = field(default_factory=dict)  # schema name -> role oid
    schema_acls: dict[str, dict[int, frozenset[str]]] = field(default_factory=dict)


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
        for key, raw in store.scan(_SCHEMA_OWNER_NS):
            self._s.schema_owners[key] = int(_decode(raw)["owner"])
        for key, raw in store.scan(_SCHEMA_ACL_NS):
            acl = _decode(raw)["acl"]
            self._s.schema_acls[key] = {int(g): frozenset(p) for g, p in acl.items()}
        if BOOTSTRAP_SUPERUSER not in self._s.roles:
            self._put(
                Role(BOOTSTRAP_OID, BOOTSTRAP_SUPERUSER, superuser=True, createdb=True, createrole=True)
            )
        if store.get(_SCHEMA_ACL_NS, PUBLIC_SCHEMA) is None:
            old = any(not r.superuser for r in self._s.roles.values())  # roles made before schemas had ACLs
            self._write_acl(
                _SCHEMA_ACL_NS, PUBLIC_SCHEMA, {0: PUBLIC_SCHEMA_DEFAULT | ({"CREATE"} if old else set())}
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
            acl = self._s.acls.get(relation_id, {})
            if oid in acl:  # the new owner's grants merge into what it has as owner (PostgreSQL)
                self._write_acl(_ACL_NS, relation_id, {g: p for g, p in acl.items() if g != oid})

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
            acl = _changed(self._s.acls.get(relation_id, {}), grantees, privs, revoke)
            self._write_acl(_ACL_NS, relation_id, acl)

    # -- schemas ---------------------------------------------------------------------------------
    def schema_owner(self, schema: str) -> int:
        return self._s.schema_owners.get(schema, BOOTSTRAP_OID)

    def schema_owners(self) -> dict[str, int]:
        return dict(self._s.schema_owners)

    def set_schema_owner(self, schema: str, oid: int) -> None:
        with self._lock:
            self.store.put(_SCHEMA_OWNER_NS, schema, json.dumps({"v": FORMAT_VERSION, "owner": oid}))
            self._s.schema_owners[schema] = oid
            acl = self._s.schema_acls.get(schema)
            if acl is not None and oid in acl:  # merged into the owner's (PostgreSQL's aclnewowner)
                self._write_acl(_SCHEMA_ACL_NS, schema, {g: p for g, p in acl.items() if g != oid})

    def schema_privileges(self, schema: str, oid: int) -> frozenset[str]:
        """What `oid` was granted on the schema (directly or through PUBLIC)."""
        acl = self._s.schema_acls.get(schema, {})
        return acl.get(oid, frozenset()) | acl.get(0, frozenset())

    def schema_grants(self) -> dict[str, dict[int, frozenset[str]]]:
        return {name: dict(acl) for name, acl in self._s.schema_acls.items()}

    def change_schema_grants(
        self, schema: str, grantees: list[int], privs: frozenset[str], revoke: bool
    ) -> None:
        with self._lock:
            acl = _changed(self._s.schema_acls.get(schema, {}), grantees, privs, revoke)
            self._write_acl(_SCHEMA_ACL_NS, schema, acl)

    def forget_schema(self, schema: str) -> None:
        """A dropped schema: its owner and grants go with it (a new one of that name starts afresh)."""
        with self._lock, self.store.transaction():
            self.store.delete(_SCHEMA_OWNER_NS, schema)
            self.store.delete(_SCHEMA_ACL_NS, schema)
            self._s.schema_owners.pop(schema, None)
            self._s.schema_acls.pop(schema, None)

    def schemas_owned_by(self, oid: int) -> list[str]:
        return sorted(n for n, o in self._s.schema_owners.items() if o == oid)

    def schemas_granted_to(self, oid: int) -> list[str]:
        return sorted(n for n, acl in self._s.schema_acls.items() if acl.get(oid))

    def _write_acl(self, ns: str, key: Any, acl: dict[int, frozenset[str]]) -> None:
        """Store one object's grants (a relation's by id, a schema's by name); none: no record,
        except for a schema (an empty record says PUBLIC lost its default)."""
        cache: dict[Any, dict[int, frozenset[str]]] = self._s.acls if ns == _ACL_NS else self._s.schema_acls
        if acl or ns == _SCHEMA_ACL_NS:
            body = {"v": FORMAT_VERSION, "acl": {str(g): sorted(p) for g, p in acl.items()}}
            self.store.put(ns, str(key), json.dumps(body))
            cache[key] = acl
        else:
            self.store.delete(ns, str(key))
            cache.pop(key, None)

    def known_relations(self) -> set[int]:
        """Relations with an owner or grant record."""
        return set(self._s.owners) | set(self._s.acls)

    def forget_relation(self, relation_id: int) -> None:
        """A dropped relation: its owner and grants go with it."""
        with self._lock:
            self.store.delete(_OWNER_NS, str(relation_id))
            self._s.owners.pop(relation_id, None)
            self._write_acl(_ACL_NS, relation_id, {})


def _changed(
    acl: dict[int, frozenset[str]], grantees: list[int], privs: frozenset[str], revoke: bool
) -> dict[int, frozenset[str]]:
    """`acl` with `privs` added for (or, with `revoke`, removed from) each grantee."""
    out = dict(acl)
    for g in grantees:
        now = out.get(g, frozenset())
        now = now - privs if revoke else now | privs
        if now:
            out[g] = now
        else:
            out.pop(g, None)
    return out
