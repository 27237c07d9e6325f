select kind, count(*) as n from {{ source('app', 'events') }} group by kind
