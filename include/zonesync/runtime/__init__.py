"""What a running zonesync process needs to reach its parts: zone endpoints, the long-lived
workers built from them. No dev-environment fallback lives here unless a caller asks."""
