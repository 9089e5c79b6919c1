"""HTTP client side shared by the CLI and the TUI: API client, credentials, token cache."""
