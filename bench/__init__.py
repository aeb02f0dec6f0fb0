"""`make bench`: speed targets as ratios against a baseline measured in the same run.

Each benchmark returns rows of (name, zonesync measurement, baseline measurement,
unit, target ratio); the runner prints one table. Absolute numbers depend on the
machine; ratios measured side by side in one run do not (much).
"""
