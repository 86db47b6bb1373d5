"""Upstreams: what to send to each wire format (adapters) and how the bytes move (the warm pool)."""
