{{ config(materialized='incremental', indexes=[{'columns': ['amount']}]) }}
-- no "only new rows" filter: piestream creates it as a materialized view, kept current by itself
select id, amount from {{ ref('orders') }} where amount > 2
