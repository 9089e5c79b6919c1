"""The `wq` command line."""
