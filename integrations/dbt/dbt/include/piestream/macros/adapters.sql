{# piestream's replacements for dbt-postgres macros that use statements piestream does not have. #}

{% macro piestream__truncate_relation(relation) -%}
  {# a seed re-run empties its table (TRUNCATE is transactional: inside dbt's block) #}
  {% call statement('truncate_relation') -%}
    truncate table {{ relation }}
  {%- endcall %}
{%- endmacro %}

{% macro piestream__rename_relation(from_relation, to_relation) -%}
  {% do adapter.drop_relation(to_relation) %}
  {% call statement('rename_relation') -%}
    alter {{ 'materialized view' if from_relation.type == 'materialized_view' else ('view' if from_relation.type == 'view' else 'table') }}
      {{ from_relation }} rename to {{ adapter.quote(to_relation.identifier) }}
  {%- endcall %}
{%- endmacro %}

{% macro piestream__drop_relation(relation) -%}
  {% call statement('drop_relation', auto_begin=False) -%}
    {%- if relation.type == 'materialized_view' -%}
      drop materialized view if exists {{ relation }} cascade
    {%- elif relation.type == 'view' -%}
      drop view if exists {{ relation }} cascade
    {%- else -%}
      drop table if exists {{ relation }} cascade
    {%- endif -%}
  {%- endcall %}
{%- endmacro %}

{% macro piestream__create_materialized_view_as(relation, sql) -%}
  create materialized view {{ relation }} as (
    {{ sql }}
  )
{%- endmacro %}

{% macro piestream__create_table_as(temporary, relation, sql) -%}
  {%- set sql_header = config.get('sql_header', none) -%}
  {{ sql_header if sql_header is not none }}
  create {% if temporary -%}temporary{%- endif %} table {{ relation }} as (
    {{ sql }}
  )
{%- endmacro %}

{% macro piestream__create_view_as(relation, sql) -%}
  {%- set sql_header = config.get('sql_header', none) -%}
  {{ sql_header if sql_header is not none }}
  create view {{ relation }} as (
    {{ sql }}
  )
{%- endmacro %}
