"""Zone switch: move a ZSID range from one zone to another without two writers at any instant."""
