"""The HTTP face of the gateway: an ASGI application served by uvicorn."""
