"""Advice for a deployment: tune (which proposer and k), plan (memory and bandwidth), the demo."""
