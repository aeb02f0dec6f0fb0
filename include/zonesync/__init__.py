"""zonesync: keep each record writable in exactly one zone, replicate every change, move data safely."""

__version__ = "0.1.0"
