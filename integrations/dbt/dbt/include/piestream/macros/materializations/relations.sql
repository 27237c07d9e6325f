{#
  piestream's materializations. Each drops what the model's name holds (any type) and creates the
  model afresh: piestream has no ALTER ... RENAME, so dbt-postgres' build-under-a-temporary-name-
  then-swap does not apply. A materialized view created again backfills from its inputs.
#}

{% macro piestream__build_relation(relation_type, create_sql) %}
  {%- set target_relation = this.incorporate(type=relation_type) -%}
  {%- set existing_relation = load_cached_relation(this) -%}
  {%- set grant_config = config.get('grants') -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}

  {% if existing_relation is not none %}
    {{ adapter.drop_relation(existing_relation) }}
  {% endif %}

  {% call statement('main') -%}
    {{ create_sql(target_relation) }}
  {%- endcall %}

  {% if relation_type != 'view' %}
    {{ create_indexes(target_relation) }}
  {% endif %}
  {% do apply_grants(target_relation, grant_config, should_revoke=False) %}
  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}
{% endmacro %}

{% macro piestream__mv_sql(relation) %}{{ piestream__create_materialized_view_as(relation, sql) }}{% endmacro %}
{% macro piestream__table_sql(relation) %}{{ piestream__create_table_as(False, relation, sql) }}{% endmacro %}
{% macro piestream__view_sql(relation) %}{{ piestream__create_view_as(relation, sql) }}{% endmacro %}

{# a streaming job: piestream keeps its rows equal to the query at every committed epoch #}
{% materialization materialized_view, adapter='piestream' %}
  {{ return(piestream__build_relation('materialized_view', piestream__mv_sql)) }}
{% endmaterialization %}

{# CREATE TABLE AS: the query's rows once, at one snapshot (not kept up to date) #}
{% materialization table, adapter='piestream' %}
  {{ return(piestream__build_relation('table', piestream__table_sql)) }}
{% endmaterialization %}

{% materialization view, adapter='piestream' %}
  {{ return(piestream__build_relation('view', piestream__view_sql)) }}
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
  {{ return(piestream__build_relation('materialized_view', piestream__mv_sql)) }}
{% endmaterialization %}

{#
  A connector: the model's SQL is the whole CREATE SOURCE / CREATE TABLE ... WITH (connector = ...)
  statement, with {{ this }} as its name. What the name held is dropped first.
#}
{% materialization source, adapter='piestream' %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {% call statement('drop_source', auto_begin=False) -%}
    drop source if exists {{ target_relation }} cascade
  {%- endcall %}
  {%- set existing_relation = load_cached_relation(this) -%}
  {% if existing_relation is not none %}
    {{ adapter.drop_relation(existing_relation) }}
  {% endif %}
  {% call statement('main', auto_begin=False) -%}
    {{ sql }}
  {%- endcall %}
  {{ run_hooks(post_hooks, inside_transaction=False) }}
  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
