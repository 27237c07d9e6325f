"""piestream.batch."""
