"""The emulated catalog tables: their columns, PostgreSQL column types and SQLite schemas.

``TABLES`` are the ``pg_catalog`` relations, ``INFO_TABLES`` the ``information_schema`` ones.
Each column keeps its PostgreSQL type name, which decides both its SQLite storage type and the
type its values are sent to the client as.
"""

from __future__ import annotations

import sqlite3

#: table -> [(column, pg type)]. Types: bool int2 int4 int8 oid float4 float8 text name char regclass.
_TABLES_TEXT: dict[str, str] = {
    "pg_namespace": "oid oid, nspname name, nspowner oid, nspacl text",
    "pg_class": (
        "oid oid, relname name, relnamespace oid, reltype oid, reloftype oid, relowner oid, relam oid, "
        "relfilenode oid, reltablespace oid, relpages int4, reltuples float4, relallvisible int4, "
        "reltoastrelid oid, relhasindex bool, relisshared bool, relpersistence char, relkind char, "
        "relnatts int2, relchecks int2, relhasrules bool, relhastriggers bool, relhassubclass bool, "
        "relrowsecurity bool, relforcerowsecurity bool, relispopulated bool, relreplident char, "
        "relispartition bool, relrewrite oid, relfrozenxid int8, relminmxid int8, relacl text, reloptions"
        " text, relpartbound text, relhasoids bool"
    ),
    "pg_attribute": (
        "attrelid oid, attname name, atttypid oid, attstattarget int4, attlen int2, attnum int2, attndims"
        " int4, attcacheoff int4, atttypmod int4, attbyval bool, attstorage char, attalign char, "
        "attnotnull bool, atthasdef bool, atthasmissing bool, attidentity char, attgenerated char, "
        "attisdropped bool, attislocal bool, attinhcount int4, attcollation oid, attacl text, attoptions "
        "text, attfdwoptions text, attmissingval text, attcompression char"
    ),
    "pg_type": (
        "oid oid, typname name, typnamespace oid, typowner oid, typlen int2, typbyval bool, typtype char,"
        " typcategory char, typispreferred bool, typisdefined bool, typdelim char, typrelid oid, typelem "
        "oid, typarray oid, typinput text, typoutput text, typreceive text, typsend text, typbasetype "
        "oid, typtypmod int4, typndims int4, typcollation oid, typnotnull bool, typdefault text, typalign"
        " char, typstorage char, typacl text, typsubscript oid, typmodin oid, typmodout oid, typanalyze "
        "oid"
    ),
    "pg_database": (
        "oid oid, datname name, datdba oid, encoding int4, datlocprovider char, datistemplate bool, "
        "datallowconn bool, datconnlimit int4, datcollate name, datctype name, daticulocale text, datacl "
        "text, dattablespace oid"
    ),
    "pg_index": (
        "indexrelid oid, indrelid oid, indnatts int2, indnkeyatts int2, indisunique bool, indisprimary "
        "bool, indisexclusion bool, indimmediate bool, indisclustered bool, indisvalid bool, indcheckxmin"
        " bool, indisready bool, indislive bool, indisreplident bool, indkey int2vector, indcollation "
        "text, indclass text, indoption text, indexprs text, indpred text, indnullsnotdistinct bool"
    ),
    "pg_constraint": (
        "oid oid, conname name, connamespace oid, contype char, condeferrable bool, condeferred bool, "
        "convalidated bool, conrelid oid, contypid oid, conindid oid, conparentid oid, confrelid oid, "
        "confupdtype char, confdeltype char, confmatchtype char, conislocal bool, coninhcount int4, "
        "connoinherit bool, conkey text, confkey text, conbin text"
    ),
    "pg_description": "objoid oid, classoid oid, objsubid int4, description text",
    "pg_shdescription": "objoid oid, classoid oid, description text",
    "pg_am": "oid oid, amname name, amhandler text, amtype char",
    "pg_attrdef": "oid oid, adrelid oid, adnum int2, adbin text",
    "pg_roles": (
        "oid oid, rolname name, rolsuper bool, rolinherit bool, rolcreaterole bool, rolcreatedb bool, "
        "rolcanlogin bool, rolreplication bool, rolconnlimit int4, rolpassword text, rolvaliduntil text, "
        "rolbypassrls bool, rolconfig text"
    ),
    "pg_user": (
        "usename name, usesysid oid, usecreatedb bool, usesuper bool, userepl bool, usebypassrls bool, "
        "passwd text, valuntil text, useconfig text"
    ),
    "pg_settings": (
        "name text, setting text, unit text, category text, short_desc text, extra_desc text, context "
        "text, vartype text, source text, min_val text, max_val text, enumvals text, boot_val text, "
        "reset_val text, sourcefile text, sourceline int4, pending_restart bool"
    ),
    "pg_tablespace": "oid oid, spcname name, spcowner oid, spcacl text, spcoptions text",
    "pg_collation": (
        "oid oid, collname name, collnamespace oid, collowner oid, collprovider char, collisdeterministic"
        " bool, collencoding int4, collcollate name, collctype name"
    ),
    "pg_tables": (
        "schemaname name, tablename name, tableowner name, tablespace name, hasindexes bool, hasrules "
        "bool, hastriggers bool, rowsecurity bool"
    ),
    "pg_views": "schemaname name, viewname name, viewowner name, definition text",
    "pg_matviews": (
        "schemaname name, matviewname name, matviewowner name, tablespace name, hasindexes bool, "
        "ispopulated bool, definition text"
    ),
    "pg_indexes": "schemaname name, tablename name, indexname name, tablespace name, indexdef text",
    "pg_stat_activity": (
        "datid oid, datname name, pid int4, usesysid oid, usename name, application_name text, "
        "client_addr text, client_port int4, backend_start text, query_start text, state text, query "
        "text, backend_type text"
    ),
    "pg_proc": (
        "oid oid, proname name, pronamespace oid, proowner oid, prolang oid, procost float4, prorows "
        "float4, provariadic oid, prosupport text, prokind char, prosecdef bool, proleakproof bool, "
        "proisstrict bool, proretset bool, provolatile char, proparallel char, pronargs int2, "
        "pronargdefaults int2, prorettype oid, proargtypes oidvector, proallargtypes text, proargmodes "
        "text, proargnames text, proargdefaults text, protrftypes text, prosrc text, probin text, "
        "prosqlbody text, proconfig text, proacl text"
    ),
    "pg_language": (
        "oid oid, lanname name, lanowner oid, lanispl bool, lanpltrusted bool, lanplcallfoid oid, "
        "laninline oid, lanvalidator oid, lanacl text"
    ),
    "pg_extension": (
        "oid oid, extname name, extowner oid, extnamespace oid, extrelocatable bool, extversion text, "
        "extconfig text, extcondition text"
    ),
    "pg_enum": "oid oid, enumtypid oid, enumsortorder float4, enumlabel name",
    "pg_sequence": (
        "seqrelid oid, seqtypid oid, seqstart int8, seqincrement int8, seqmax int8, seqmin int8, seqcache"
        " int8, seqcycle bool"
    ),
    "pg_inherits": "inhrelid oid, inhparent oid, inhseqno int4, inhdetachpending bool",
    "pg_trigger": (
        "oid oid, tgrelid oid, tgparentid oid, tgname name, tgfoid oid, tgtype int2, tgenabled char, "
        "tgisinternal bool, tgconstrrelid oid, tgconstrindid oid, tgconstraint oid, tgdeferrable bool, "
        "tginitdeferred bool, tgnargs int2, tgattr int2vector, tgargs text, tgqual text, tgoldtable name, "
        "tgnewtable name"
    ),
    "pg_rewrite": (
        "oid oid, rulename name, ev_class oid, ev_type char, ev_enabled char, is_instead bool, ev_qual text,"
        " ev_action text"
    ),
    "pg_policy": (
        "oid oid, polname name, polrelid oid, polcmd char, polpermissive bool, polroles text, polqual text,"
        " polwithcheck text"
    ),
    "pg_statistic_ext": (
        "oid oid, stxrelid oid, stxname name, stxnamespace oid, stxowner oid, stxstattarget int4, "
        "stxkeys int2vector, stxkind text, stxexprs text"
    ),
    "pg_publication": (
        "oid oid, pubname name, pubowner oid, puballtables bool, pubinsert bool, pubupdate bool, "
        "pubdelete bool, pubtruncate bool, pubviaroot bool"
    ),
    "pg_publication_rel": "oid oid, prpubid oid, prrelid oid, prqual text, prattrs int2vector",
    "pg_publication_namespace": "oid oid, pnpubid oid, pnnspid oid",
    "pg_partitioned_table": (
        "partrelid oid, partstrat char, partnatts int2, partdefid oid, partattrs int2vector, partclass "
        "text, partcollation text, partexprs text"
    ),
    "pg_foreign_table": "ftrelid oid, ftserver oid, ftoptions text",
    "pg_foreign_server": (
        "oid oid, srvname name, srvowner oid, srvfdw oid, srvtype text, srvversion text, srvacl text, "
        "srvoptions text"
    ),
    "pg_depend": (
        "classid oid, objid oid, objsubid int4, refclassid oid, refobjid oid, refobjsubid int4, deptype char"
    ),
    "pg_event_trigger": (
        "oid oid, evtname name, evtevent name, evtowner oid, evtfoid oid, evtenabled char, evttags text"
    ),
    "pg_range": (
        "rngtypid oid, rngsubtype oid, rngmultitypid oid, rngcollation oid, rngsubopc oid, rngcanonical "
        "text, rngsubdiff text"
    ),
    "pg_opclass": (
        "oid oid, opcmethod oid, opcname name, opcnamespace oid, opcowner oid, opcfamily oid, opcintype "
        "oid, opcdefault bool, opckeytype oid"
    ),
    "pg_auth_members": "roleid oid, member oid, grantor oid, admin_option bool",
    # empty: piestream has none of these objects (pg_dump reads them all)
    "pg_init_privs": "objoid oid, classoid oid, objsubid int4, privtype char, initprivs text",
    "pg_cast": "oid oid, castsource oid, casttarget oid, castfunc oid, castcontext char, castmethod char",
    "pg_transform": "oid oid, trftype oid, trflang oid, trffromsql oid, trftosql oid",
    "pg_operator": (
        "oid oid, oprname name, oprnamespace oid, oprowner oid, oprkind char, oprcanmerge bool, "
        "oprcanhash bool, oprleft oid, oprright oid, oprresult oid, oprcom oid, oprnegate oid, oprcode "
        "oid, oprrest oid, oprjoin oid"
    ),
    "pg_opfamily": "oid oid, opfmethod oid, opfname name, opfnamespace oid, opfowner oid",
    "pg_conversion": (
        "oid oid, conname name, connamespace oid, conowner oid, conforencoding int4, contoencoding int4, "
        "conproc oid, condefault bool"
    ),
    "pg_ts_parser": (
        "oid oid, prsname name, prsnamespace oid, prsstart oid, prstoken oid, prsend oid, prsheadline oid, "
        "prslextype oid"
    ),
    "pg_ts_template": "oid oid, tmplname name, tmplnamespace oid, tmplinit oid, tmpllexize oid",
    "pg_ts_dict": (
        "oid oid, dictname name, dictnamespace oid, dictowner oid, dicttemplate oid, dictinitoption text"
    ),
    "pg_ts_config": "oid oid, cfgname name, cfgnamespace oid, cfgowner oid, cfgparser oid",
    "pg_foreign_data_wrapper": (
        "oid oid, fdwname name, fdwowner oid, fdwhandler oid, fdwvalidator oid, fdwacl text, fdwoptions text"
    ),
    "pg_user_mapping": "oid oid, umuser oid, umserver oid, umoptions text",
    "pg_user_mappings": "umid oid, srvid oid, srvname name, umuser oid, usename name, umoptions text",
    "pg_default_acl": "oid oid, defaclrole oid, defaclnamespace oid, defaclobjtype char, defaclacl text",
    "pg_aggregate": (
        "aggfnoid oid, aggkind char, aggnumdirectargs int2, aggtransfn oid, aggfinalfn oid, aggcombinefn "
        "oid, aggserialfn oid, aggdeserialfn oid, aggmtransfn oid, aggminvtransfn oid, aggmfinalfn oid, "
        "aggfinalextra bool, aggmfinalextra bool, aggfinalmodify char, aggmfinalmodify char, aggsortop "
        "oid, aggtranstype oid, aggtransspace int4, aggmtranstype oid, aggmtransspace int4, agginitval "
        "text, aggminitval text"
    ),
    "pg_subscription": (
        "oid oid, subdbid oid, subname name, subowner oid, subenabled bool, subbinary bool, substream "
        "char, subtwophasestate char, subdisableonerr bool, subconninfo text, subslotname name, "
        "subsynccommit text, subpublications text"
    ),
    "pg_largeobject_metadata": "oid oid, lomowner oid, lomacl text",
    "pg_seclabel": "objoid oid, classoid oid, objsubid int4, provider text, label text",
    "pg_shseclabel": "objoid oid, classoid oid, provider text, label text",
    "pg_seclabels": (
        "objoid oid, classoid oid, objsubid int4, objtype text, objnamespace oid, objname text, provider "
        "text, label text"
    ),
    "pg_amop": (
        "oid oid, amopfamily oid, amoplefttype oid, amoprighttype oid, amopstrategy int2, amoppurpose "
        "char, amopopr oid, amopmethod oid, amopsortfamily oid"
    ),
    "pg_amproc": (
        "oid oid, amprocfamily oid, amproclefttype oid, amprocrighttype oid, amprocnum int2, amproc oid"
    ),
}
TABLES: dict[str, list[tuple[str, str]]] = {
    name: [tuple(c.split()) for c in cols.split(", ")]  # type: ignore[misc]
    for name, cols in _TABLES_TEXT.items()
}

_INFO_TABLES_TEXT: dict[str, str] = {
    "tables": (
        "table_catalog name, table_schema name, table_name name, table_type text, "
        "self_referencing_column_name name, reference_generation text, user_defined_type_catalog name, "
        "user_defined_type_schema name, user_defined_type_name name, is_insertable_into text, is_typed "
        "text, commit_action text"
    ),
    "columns": (
        "table_catalog name, table_schema name, table_name name, column_name name, ordinal_position int4,"
        " column_default text, is_nullable text, data_type text, character_maximum_length int4, "
        "character_octet_length int4, numeric_precision int4, numeric_precision_radix int4, numeric_scale"
        " int4, datetime_precision int4, interval_type text, udt_catalog name, udt_schema name, udt_name "
        "name, is_identity text, is_generated text, is_updatable text"
    ),
    "schemata": "catalog_name name, schema_name name, schema_owner name",
    "views": "table_catalog name, table_schema name, table_name name, view_definition text",
    "table_constraints": (
        "constraint_catalog name, constraint_schema name, constraint_name name, table_schema name, "
        "table_name name, constraint_type text"
    ),
    "table_privileges": (
        "grantor name, grantee name, table_catalog name, table_schema name, table_name name, "
        "privilege_type text, is_grantable text, with_hierarchy text"
    ),
    "key_column_usage": (
        "constraint_schema name, constraint_name name, table_schema name, table_name name, column_name "
        "name, ordinal_position int4"
    ),
}
INFO_TABLES: dict[str, list[tuple[str, str]]] = {
    name: [tuple(c.split()) for c in cols.split(", ")]  # type: ignore[misc]
    for name, cols in _INFO_TABLES_TEXT.items()
}

CATALOG_TABLE_NAMES = frozenset(TABLES)

#: PostgreSQL's own oids of its catalog tables (``'pg_class'::regclass``, every row's ``tableoid``):
#: clients compare pg_description.classoid / pg_depend.classid with them. The views and the
#: catalogs PostgreSQL has no fixed oid for get 1000 + their place in TABLES' sorted names.
_PG_OIDS = {
    "pg_class": 1259, "pg_type": 1247, "pg_proc": 1255, "pg_attribute": 1249, "pg_namespace": 2615,
    "pg_database": 1262, "pg_index": 2610, "pg_constraint": 2606, "pg_description": 2609,
    "pg_shdescription": 2396, "pg_am": 2601, "pg_attrdef": 2604, "pg_tablespace": 1213,
    "pg_collation": 3456, "pg_extension": 3079, "pg_enum": 3501, "pg_sequence": 2224,
    "pg_inherits": 2611, "pg_trigger": 2620, "pg_rewrite": 2618, "pg_policy": 3256,
    "pg_statistic_ext": 3381, "pg_publication": 6104, "pg_publication_rel": 6106,
    "pg_publication_namespace": 6237, "pg_partitioned_table": 3350, "pg_foreign_table": 3118,
    "pg_foreign_server": 1417, "pg_depend": 2608, "pg_event_trigger": 3466, "pg_range": 3541,
    "pg_opclass": 2616, "pg_language": 2612, "pg_auth_members": 1261, "pg_roles": 12000, "pg_user": 12001,
    "pg_init_privs": 3394, "pg_cast": 2605, "pg_transform": 3576, "pg_operator": 2617,
    "pg_opfamily": 2753, "pg_conversion": 2607, "pg_ts_parser": 3601, "pg_ts_template": 3764,
    "pg_ts_dict": 3600, "pg_ts_config": 3602, "pg_foreign_data_wrapper": 2328, "pg_user_mapping": 1418,
    "pg_default_acl": 826, "pg_aggregate": 2600, "pg_subscription": 6100,
    "pg_largeobject_metadata": 2995, "pg_seclabel": 3596, "pg_shseclabel": 3592, "pg_amop": 2602,
    "pg_amproc": 2603,
}  # fmt: skip
CATALOG_OIDS: dict[str, int] = {name: _PG_OIDS.get(name, 1000 + i) for i, name in enumerate(sorted(TABLES))}
CATALOG_BY_OID: dict[int, str] = {oid: name for name, oid in CATALOG_OIDS.items()}
_SQLITE_TYPE = {
    "bool": "INTEGER",
    "int2": "INTEGER",
    "int4": "INTEGER",
    "int8": "INTEGER",
    "oid": "INTEGER",
    "float4": "REAL",
    "float8": "REAL",
}


def create_tables(conn: sqlite3.Connection) -> None:
    """Empty catalog tables, in the ``pg_catalog`` and ``information_schema`` databases attached
    to `conn`."""
    for schema, tables in (("pg_catalog", TABLES), ("information_schema", INFO_TABLES)):
        for name, cols in tables.items():
            decl = ", ".join(f'"{c}" {_SQLITE_TYPE.get(t, "TEXT")}' for c, t in cols)
            conn.execute(f"CREATE TABLE {schema}.{name} ({decl})")


def table_columns(table: str) -> list[tuple[str, str]]:
    return TABLES.get(table) or INFO_TABLES.get(table) or []
