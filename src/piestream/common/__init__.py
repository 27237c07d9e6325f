"""piestream.common."""
