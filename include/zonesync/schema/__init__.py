"""Schema changes across zones (docs/schema-changes.md): the tables' definitions in each
zone and how they differ (definitions.py)."""
