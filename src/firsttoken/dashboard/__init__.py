"""The dashboard's page and assets (`assets/`), served by the gateway at /dashboard (server/dashboard.py)."""
