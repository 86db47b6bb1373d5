"""The edge cache: exact keys, stores, and replays in either shape."""
