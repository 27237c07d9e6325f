"""piestream.encoding."""
