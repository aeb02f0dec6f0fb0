"""The meta store (PiMMS / Global Meta): zones, rule versions, guards, entities, audit."""
