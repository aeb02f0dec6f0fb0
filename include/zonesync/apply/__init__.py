"""Apply: Kafka -> a zone's database (the applier).

Layers, each importing only the ones below it: loop/ (the applier) -> batch/ (one
transaction) -> bookkeeping/ (zonesync's tables) -> errors.py (the exceptions every
layer raises or catches); tools/ (operator commands) sits beside loop/ and uses batch/
and bookkeeping/."""
