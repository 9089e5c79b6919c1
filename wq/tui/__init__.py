"""`wq tui`: a live Textual dashboard of pools, items and their history.

It talks to the daemon only through `wq.client` (never the engine), so it works from a
laptop against a cluster with the CLI's credentials.
"""
