"""The engine: requests in, one step() at a time (schedule, plan, propose, score, verify, commit)."""
