"""The methods a benchmark compares: our engine with each proposer, and transformers' generate
(plain, assisted generation, prompt lookup) on the same loaded models."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import psutil
import torch

from ..engine import SpeculativeGenerator
from ..sampling import SamplingParams

ENGINE_METHODS = {"plain": "none", "draft": "draft", "ngram": "ngram"}
HF_METHODS = ("hf", "hf-assisted", "hf-pld")
ALL_METHODS = (*ENGINE_METHODS, *HF_METHODS)
# Methods whose speed depends on k; the others run once per grid point with k reported as None.
K_METHODS = ("draft", "ngram", "hf-pld")


@dataclass
class Run:
    token_ids: list[int]
    total_s: float
    steps: list[tuple[float, int]]  # (end time since start, tokens emitted)
    peak_rss_bytes: int = 0
    cuda_peak_bytes: int | None = None
    target_passes: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    draft_s: float | None = None
    verify_s: float | None = None
    prefill_s: float | None = None


class Method(Protocol):
    name: str
    backend: str

    def run(self, prompt_ids: list[int], params: SamplingParams, k: int | None) -> Run: ...


class EngineMethod:
    backend = "torch"

    def __init__(self, name: str, gen: SpeculativeGenerator):
        self.name = name
        self.gen = gen
        self.proposer = ENGINE_METHODS[name]

    def run(self, prompt_ids, params, k) -> Run:
        with PeakMemory() as mem:
            out = self.gen.generate(prompt_ids, params, k=k or 0, chat=False, proposer=self.proposer)
        s = out.stats
        return Run(
            token_ids=out.token_ids, total_s=s["total_s"], steps=[(e, n) for e, _, _, n in s["steps"]],
            peak_rss_bytes=mem.peak, cuda_peak_bytes=mem.cuda_peak, target_passes=s["target_passes"],
            drafted=s["drafted_tokens"], accepted=s["accepted_tokens"],
            drafted_per_position=s["drafted_per_position"], accepted_per_position=s["accepted_per_position"],
            draft_s=s["draft_s"], verify_s=s["verify_s"], prefill_s=s["prefill_s"],
        )


class HFMethod:
    """transformers' generate. hf-assisted keeps transformers' own defaults for the assistant
    (its heuristic number of assistant tokens); hf-pld uses prompt_lookup_num_tokens = k."""

    backend = "transformers"

    def __init__(self, name: str, model, tokenizer, eos_token_ids, assistant=None):
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.eos = list(eos_token_ids)
        self.assistant = assistant

    def run(self, prompt_ids, params, k) -> Run:
        ids = torch.tensor([prompt_ids], device=self.model.device)
        kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            do_sample=not params.greedy,
            eos_token_id=[] if params.ignore_eos else self.eos,
            pad_token_id=self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos[0],
        )
        if not params.greedy:
            # Explicit values: a model's generation_config may carry its own top_k / top_p defaults.
            kwargs.update(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                          min_p=params.min_p or None)
        if self.name == "hf-assisted":
            kwargs["assistant_model"] = self.assistant
        elif self.name == "hf-pld":
            kwargs["prompt_lookup_num_tokens"] = k
        if params.seed is not None:
            torch.manual_seed(params.seed)
        streamer = TimingStreamer()
        with PeakMemory() as mem:
            streamer.start = time.perf_counter()
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), streamer=streamer, **kwargs)
            total = time.perf_counter() - streamer.start
        new = out[0, len(prompt_ids):].tolist()
        return Run(token_ids=new, total_s=total, steps=streamer.steps, peak_rss_bytes=mem.peak,
                   cuda_peak_bytes=mem.cuda_peak)


class TimingStreamer:
    """A transformers streamer that records when each chunk of tokens arrives."""

    def __init__(self):
        self.start = 0.0
        self.steps: list[tuple[float, int]] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # generate() first sends the prompt
            self._prompt_seen = True
            return
        self.steps.append((time.perf_counter() - self.start, int(value.numel())))

    def end(self) -> None:
        pass


class PeakMemory:
    """Process RSS high-water mark during a block (sampled every 5 ms), and CUDA peak allocation."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.peak = 0
        self.cuda_peak: int | None = None
        self._stop = threading.Event()
        self._proc = psutil.Process()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakMemory":
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self.peak = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        if torch.cuda.is_available():
            self.cuda_peak = int(torch.cuda.max_memory_allocated())
