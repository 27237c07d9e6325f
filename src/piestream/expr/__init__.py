"""piestream.expr."""
