"""HTTP routers of the daemon."""
