{{ config(materialized='table') }}
-- CREATE TABLE AS: the rows once, at one snapshot
select id, name from {{ ref('customers') }}
