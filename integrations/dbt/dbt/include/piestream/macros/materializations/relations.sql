{#
  piestream's materializations.

  materialized_view, view, source, sink, index: a streaming job (or a connector) is costly to rebuild
  (it backfills, or re-reads / re-emits its data), so a re-run keeps it when the name already holds
  the same kind made by the same statement (piestream keeps definitions as written), as
  dbt-risingwave does; when the SQL changed, or under --full-refresh, it is dropped (CASCADE)
  and created again. What exists is read from the server, not from dbt's cache, since a DROP ...
  CASCADE of an upstream model drops its dependents too.

  table: dbt-postgres' swap: build under `<name>__dbt_tmp`, rename what the name held to
  `<name>__dbt_backup`, rename the new one into place, drop the backup.
#}

{% macro piestream__no_op(relation) %}
  {% do store_raw_result(name='main', message='skip ' ~ relation, code='skip', rows_affected='-1') %}
{% endmacro %}

{% macro piestream__drop_existing(relation, existing) %}
  {% if existing is not none %}
    {% call statement('drop_existing', auto_begin=False) -%}
      drop {{ existing['words'] }} if exists {{ relation }} cascade
    {%- endcall %}
  {% endif %}
{% endmacro %}

{# keep-or-rebuild for a statement that creates a streaming job or a connector #}
{% macro piestream__keep_or_create(kind, create_sql, relation) %}
  {%- set existing = adapter.piestream_existing(relation) -%}
  {%- set unchanged = adapter.piestream_unchanged(existing, kind, create_sql) -%}
  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {% if unchanged and not should_full_refresh() %}
    {{ log("piestream: " ~ relation ~ " is unchanged; kept (use --full-refresh to re-create it)") }}
    {{ piestream__no_op(relation) }}
  {% else %}
    {{ piestream__drop_existing(relation, existing) }}
    {% call statement('main') -%}
      {{ create_sql }}
    {%- endcall %}
  {% endif %}
  {{ return(not unchanged or should_full_refresh()) }}
{% endmacro %}

{% macro piestream__finish(target_relation, created) %}
  {% if created and target_relation.type in ('materialized_view', 'table') %}
    {{ create_indexes(target_relation) }}
  {% endif %}
  {% do apply_grants(target_relation, config.get('grants'), should_revoke=False) %}
  {% do persist_docs(target_relation, model) %}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}
{% endmacro %}

{# a streaming job: piestream keeps its rows equal to the query at every committed epoch #}
{% macro piestream__materialized_view(target_relation) %}
  {%- set create_sql = piestream__create_materialized_view_as(target_relation, sql) -%}
  {%- set created = piestream__keep_or_create('materialized_view', create_sql, target_relation) -%}
  {{ piestream__finish(target_relation, created) }}
  {{ return({'relations': [target_relation]}) }}
{% endmacro %}

{% materialization materialized_view, adapter='piestream' %}
  {{ return(piestream__materialized_view(this.incorporate(type='materialized_view'))) }}
{% endmaterialization %}

{# table: dbt-postgres' build-then-swap with ALTER ... RENAME TO (a re-run reads its inputs again) #}
{% macro piestream__swap(relation_type, create_sql) %}
  {%- set target_relation = this.incorporate(type=relation_type) -%}
  {%- set existing = adapter.piestream_existing(target_relation) -%}
  {%- set intermediate = make_intermediate_relation(target_relation) -%}
  {%- set backup = make_backup_relation(target_relation, relation_type) -%}
  {{ piestream__drop_existing(intermediate, adapter.piestream_existing(intermediate)) }}
  {{ piestream__drop_existing(backup, adapter.piestream_existing(backup)) }}
  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {% call statement('main') -%}
    {{ create_sql(intermediate) }}
  {%- endcall %}
  {% if relation_type == 'table' %}
    {{ create_indexes(intermediate) }}
  {% endif %}
  {% if existing is not none %}
    {% call statement('rename_existing') -%}
      alter {{ existing['words'] }} {{ target_relation }} rename to {{ backup.identifier }}
    {%- endcall %}
  {% endif %}
  {% call statement('rename_intermediate') -%}
    alter table {{ intermediate }} rename to {{ target_relation.identifier }}
  {%- endcall %}
  {% do apply_grants(target_relation, config.get('grants'), should_revoke=False) %}
  {% do persist_docs(target_relation, model) %}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {# what read the old relation (a materialized view over it) goes with it; dbt builds it again #}
  {{ piestream__drop_existing(backup, existing) }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}
  {{ return({'relations': [target_relation]}) }}
{% endmacro %}

{% macro piestream__table_sql(relation) %}{{ piestream__create_table_as(False, relation, sql) }}{% endmacro %}
{% macro piestream__view_sql(relation) %}{{ piestream__create_view_as(relation, sql) }}{% endmacro %}

{# CREATE TABLE AS: the query's rows once, at one snapshot (not kept up to date) #}
{% materialization table, adapter='piestream' %}
  {{ return(piestream__swap('table', piestream__table_sql)) }}
{% endmaterialization %}

{# a view is kept while its SQL is unchanged: re-creating it would drop what reads it (CASCADE) #}
{% materialization view, adapter='piestream' %}
  {%- set target_relation = this.incorporate(type='view') -%}
  {%- set created = piestream__keep_or_create('view', piestream__view_sql(target_relation), target_relation) -%}
  {{ piestream__finish(target_relation, false) }}
  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}

{#
  An incremental model is what a materialized view already is: piestream applies every change of
  its inputs to its rows. A model without is_incremental() becomes a materialized view; one with
  it is refused, because its "only new rows" filter over {{ this }} has no meaning for an MV.
#}
{% materialization incremental, adapter='piestream' %}
  {% if 'is_incremental' in model.raw_code %}
    {{ exceptions.raise_compiler_error(
        "piestream: incremental model " ~ model.name ~ " uses is_incremental(); piestream keeps a "
        ~ "materialized view up to date by itself: drop the is_incremental() filter and use "
        ~ "materialized='materialized_view'") }}
  {% endif %}
  {{ log("piestream: incremental model " ~ model.name ~ " is created as a materialized view", info=True) }}
  {{ return(piestream__materialized_view(this.incorporate(type='materialized_view'))) }}
{% endmaterialization %}

{# `WITH (k = 'v', ...)` of a connector's options (connector first) #}
{% macro piestream__with_options(connector, options) -%}
  with (connector = '{{ connector }}'
  {%- for k, v in (options or {}).items() -%}, {{ k }} = '{{ v | string | replace("'", "''") }}'{%- endfor -%})
{%- endmacro %}

{% macro piestream__format_encode() -%}
  {%- if config.get('format') %} format {{ config.get('format') }} encode {{ config.get('encode', 'json') }}
  {%- if config.get('encode_options') %} ({% for k, v in config.get('encode_options').items() %}{{ k }} = '{{ v }}'{% if not loop.last %}, {% endif %}{% endfor %}){% endif -%}
  {%- endif -%}
{%- endmacro %}

{#
  A connector. Either the model's SQL is the whole CREATE SOURCE / CREATE TABLE ... WITH
  (connector = ...) statement with {{ this }} as its name, or the model's SQL is empty and its
  config says it: `connector`, `connector_options` (a dict), `format` / `encode` /
  `encode_options`, `create_table` (true: CREATE TABLE, which stores the rows; default a SOURCE),
  and the columns are the model's `columns:` with `data_type` in its yml.
#}
{% macro piestream__connector_sql(relation) -%}
  {%- if sql | trim | length > 0 -%}
    {{ sql | trim | trim(';') }}
  {%- else -%}
    {%- set connector = config.get('connector') -%}
    {%- if not connector -%}
      {{ exceptions.raise_compiler_error("piestream: source model " ~ model.name ~ " has no SQL and no `connector` config") }}
    {%- endif -%}
    {%- set cols = [] -%}
    {%- for c in model.columns.values() -%}
      {%- if not c.data_type -%}
        {{ exceptions.raise_compiler_error("piestream: column " ~ c.name ~ " of source model " ~ model.name ~ " has no data_type") }}
      {%- endif -%}
      {%- do cols.append(adapter.quote(c.name) ~ ' ' ~ c.data_type) -%}
    {%- endfor -%}
    create {{ 'table' if config.get('create_table', false) else 'source' }} {{ relation }}
    {%- if cols %} ({{ cols | join(', ') }}){% endif %}
    {{ piestream__with_options(connector, config.get('connector_options')) }}{{ piestream__format_encode() }}
  {%- endif -%}
{%- endmacro %}

{% materialization source, adapter='piestream' %}
  {%- set kind = 'table' if (sql | trim | lower).startswith('create table') or config.get('create_table', false) else 'source' -%}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set created = piestream__keep_or_create(kind, piestream__connector_sql(target_relation), target_relation) -%}
  {{ piestream__finish(this.incorporate(type='external'), false) }}
  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}

{#
  A sink: the model's SQL is either the whole CREATE SINK {{ this }} ... statement, or a query with
  `connector` / `connector_options` (/ `format`, `encode`) in its config:
  CREATE SINK {{ this }} AS (query) WITH (...). A re-run with unchanged SQL keeps the sink
  (re-creating it would emit the query's rows to the sink again).
#}
{% macro piestream__sink_sql(relation) -%}
  {%- if (sql | trim | lower).startswith('create') -%}
    {{ sql | trim | trim(';') }}
  {%- else -%}
    {%- set connector = config.get('connector') -%}
    {%- if not connector -%}
      {{ exceptions.raise_compiler_error("piestream: sink model " ~ model.name ~ " is a query without a `connector` config") }}
    {%- endif -%}
    create sink {{ relation }} as (
    {{ sql }}
    ) {{ piestream__with_options(connector, config.get('connector_options')) }}{{ piestream__format_encode() }}
  {%- endif -%}
{%- endmacro %}

{% materialization sink, adapter='piestream' %}
  {%- set created = piestream__keep_or_create('sink', piestream__sink_sql(this), this) -%}
  {{ piestream__finish(this.incorporate(type='external'), false) }}
  {{ return({'relations': []}) }}
{% endmaterialization %}

{#
  An index: the model's SQL is the CREATE INDEX {{ this.identifier }} ON {{ ref('m') }} (...)
  statement (an index takes its table's schema). On a model's own relation, `indexes:` in its
  config (dbt-postgres') is the simpler way.
#}
{% materialization index, adapter='piestream' %}
  {%- set create_sql = sql | trim | trim(';') -%}
  {% if not (create_sql | lower).startswith('create') or ' index ' not in (create_sql | lower) %}
    {{ exceptions.raise_compiler_error("piestream: index model " ~ model.name ~ " must be a CREATE INDEX statement") }}
  {% endif %}
  {%- set created = piestream__keep_or_create('index', create_sql, this) -%}
  {{ piestream__finish(this.incorporate(type='external'), false) }}
  {{ return({'relations': []}) }}
{% endmaterialization %}
