"""Data tagging (seed 004 §3.2): which rows and keys belong to which locating entity.

kv_patterns.py (a KV key pattern and its variables' constraints), radix.py (a repo's
patterns in one compressed trie, every match of a key), overlap.py (whether two patterns
can match one key), rules.py (the tag rules document, checked before it is stored).
"""
