{{ config(materialized='source', create_table=true, connector='datagen',
          connector_options={'fields.n.kind': 'sequence', 'fields.n.start': '1', 'fields.n.end': '4',
                             'datagen.rows.per.second': '100'}) }}
{# a table with a connector, built from this config and the columns (with data_type) in schema.yml #}
