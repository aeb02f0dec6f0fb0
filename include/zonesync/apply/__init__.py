"""Apply: Kafka -> a zone's database (the applier)."""
