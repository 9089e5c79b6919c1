"""The `wq tui` dashboard."""
