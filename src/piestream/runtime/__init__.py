"""piestream.runtime."""
