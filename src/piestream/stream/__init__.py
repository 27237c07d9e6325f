"""piestream.stream."""
