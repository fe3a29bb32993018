"""The `verify` command: sampling through the engine, goodness-of-fit tests and the naive controls."""
