{{ config(materialized='sink', connector='blackhole') }}
-- CREATE SINK ... AS (query) WITH (connector = 'blackhole'): the query's changes go to the connector
select id, amount from {{ ref('big_orders') }}
