"""The public rejection-sampling API (`specdecode.rejection.rejection_sample`), kept at this path for
the code that imports it; the rules live in specdecode.verification."""

from .verification.block import block_rejection_sample
from .verification.rejection import rejection_sample

__all__ = ["block_rejection_sample", "rejection_sample"]
