"""Exactness: the rejection rules (token, block, tree, drafter-invariant) and the verifier that applies them."""
