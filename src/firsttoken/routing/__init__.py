"""Routing: which upstream and model answer a request."""
