"""The Kafka connector: a source (`reader`) of a topic's partitions, exactly once by offsets in
piestream's state."""
