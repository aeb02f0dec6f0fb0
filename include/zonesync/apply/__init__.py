"""Apply: Kafka -> a zone's database (the applier).

Layers, each importing only the ones below it: loop/ (the applier) -> batch/ (one
transaction) -> bookkeeping/ (zonesync's tables); tools/ (operator
commands) sits beside loop/ and uses batch/ and bookkeeping/."""
