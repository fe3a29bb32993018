"""specdecode: exact speculative decoding with draft-model and n-gram proposers."""

from .engine.engine import Engine, EngineConfig, GenerationOutput, RequestError
from .models.generator import SpeculativeGenerator
from .models.registry import ModelError
from .verification.rejection import rejection_sample
from .sampling.params import InvalidParameter, SamplingParams, probs_from_logits

__version__ = "0.1.0"

__all__ = [
    "Engine",
    "EngineConfig",
    "GenerationOutput",
    "InvalidParameter",
    "ModelError",
    "RequestError",
    "SamplingParams",
    "SpeculativeGenerator",
    "probs_from_logits",
    "rejection_sample",
]
