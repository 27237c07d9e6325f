{{ config(materialized='index') }}
create index {{ this.identifier }} on {{ ref('region_totals') }} (orders)
