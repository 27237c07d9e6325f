"""The parser layer every connector shares: decoders (ENCODE JSON | CSV | BYTES | AVRO) turn a
batch of payloads into Arrow columns in one call; envelopes (FORMAT PLAIN | UPSERT | DEBEZIUM)
turn a batch of (key, value) messages into rows and ops. Message connectors reach both through
`piestream.connectors.source`."""
