"""piestream.storage."""
