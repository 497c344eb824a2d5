"""Writes to the conversation store, one module per kind of write: which session a message
belongs to (resolve), appending to it (append), a user message's answer state (answers),
and a session's archive, reopening, rotation and compaction (lifecycle). Callers import
from the module that does what they need."""
