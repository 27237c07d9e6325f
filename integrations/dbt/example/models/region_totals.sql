-- a materialized view (the project's default): kept current as orders arrive
select c.region, count(*) as orders, sum(o.amount) as total
from {{ ref('stg_orders') }} o
join {{ ref('customers') }} c on c.id = o.customer_id
group by c.region
