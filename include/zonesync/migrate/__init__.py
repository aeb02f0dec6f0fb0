"""Multi-Geo migration of a biz entity's locating entities (docs/migration.md)."""
