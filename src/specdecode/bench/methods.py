"""The methods a benchmark compares: our engine with each proposer, and transformers' generate
(plain, assisted generation, prompt lookup) on the same loaded models."""

from __future__ import annotations

import threading
from collections import OrderedDict
import time
from typing import Protocol

import psutil
import torch

from ..engine.engine import Engine
from ..proposers import WITH_DRAFT
from ..proposers.suffix import memories_for
from ..models.backends import ggml_thread
from ..models.loader import backend_name, torch_model
from ..sampling.params import SamplingParams
from .result import Run

ENGINE_METHODS = {"plain": "none", "draft": "draft", "ngram": "ngram", "suffix": "suffix", "hybrid": "hybrid",
                  "hybrid-suffix": "hybrid-suffix"}
HF_METHODS = ("hf", "hf-assisted", "hf-pld")
LLAMACPP_METHODS = ("llamacpp", "llamacpp-pld")
# llama.cpp's own server (bench/llama_server.py): plain, its n-gram cache and its draft model.
LLAMA_SERVER_METHODS = ("llama-server", "llama-server-ngram", "llama-server-draft")
# The plain decoders a user of the default model would otherwise run, beside whatever runtime the
# target is on: our plain decoding over the torch target, llama.cpp's own loop on the shipped GGUF.
BASELINE_METHODS = ("plain-torch", "llamacpp-shipped")
PLAIN_METHODS = ("plain", "hf", "llamacpp", "llama-server", *BASELINE_METHODS)  # decoders that draft nothing
ALL_METHODS = (*ENGINE_METHODS, *HF_METHODS, *LLAMACPP_METHODS, *LLAMA_SERVER_METHODS, *BASELINE_METHODS)


class Method(Protocol):
    name: str
    backend: str
    takes_k: bool  # runs once per k value (else once, with k reported as None)
    takes_auto: bool  # also runs k="auto" (our adaptive drafting)

    def run(self, prompt_ids: list[int], params: SamplingParams, k: int | None) -> Run: ...


class EngineMethod:
    takes_auto = True

    def __init__(self, name: str, gen: Engine, label: str | None = None, sampler: str = "standard",
                 verifier: str = "token", tree: int = 0):
        self.proposer = ENGINE_METHODS[name]
        self.proposer_method = name
        # Bench prompts are seeded (reproducible runs), and a seeded request would default to the
        # drafter-invariant sampler: the bench names the sampler instead of letting the seed choose.
        self.sampler = sampler
        self.verifier = verifier
        self.tree = tree  # node budget per pass (0: chains)
        self.grammar = None  # a constraints.GrammarSpec every output must match (bench --json-schema)
        if self.proposer not in gen.proposers:
            raise ValueError(f"{name} needs a draft model: give --draft")
        self.name = label or name  # e.g. draft-llamacpp when several drafts are compared
        self.gen = gen
        # The pooled acceptance as this method's k=auto runs left it, per temperature (see run).
        self.auto_pooled: dict[float, dict] = {}
        # The suffix memory as this method's own earlier prompts left it, per (k, temperature, seed).
        self.suffix_memories: dict[tuple, dict] = {}
        self.takes_k = self.proposer != "none"
        # e.g. "torch" or "torch + llamacpp draft": which backend runs which model.
        self.backend = backend_name(gen.target)
        if self.proposer in WITH_DRAFT:
            drafter = gen.proposers["draft"]
            self.backend += f" + {backend_name(drafter.runner)} draft"
            notes = [f"vocab {drafter.runner.shortlist}"] if getattr(drafter.runner, "shortlist", None) else []
            if drafter.context_window:
                notes.append(f"last {drafter.context_window} prompt tokens")
            if notes:
                self.backend += f" ({', '.join(notes)})"

    def run(self, prompt_ids, params, k) -> Run:
        # k="auto" learns each proposer's acceptance from every request (the prior of the next
        # one). Here it learns only from this method's own earlier k=auto runs, as a server running
        # k=auto would: not from the fixed-k runs of the same prompt just before it (a preview no
        # server gets), and not from nothing either (a sweep of k=auto alone would then start
        # every request from the 0.5 prior and draft short until it had learnt better).
        saved = self.gen.pooled_acceptance
        if k == "auto":
            self.gen.pooled_acceptance = self.auto_pooled.setdefault(params.temperature, {})
        # The suffix memory likewise holds what this method generated for the prompts before this
        # one at the same k, temperature and seed: never this prompt's answer from another k or
        # repeat, which no server would have seen.
        memories = memories_for(self.gen.proposers,
                                self.suffix_memories.setdefault((k, params.temperature, params.seed), OrderedDict()))
        try:
            with memories, PeakMemory() as mem:
                out = self.gen.generate(prompt_ids, params.replace(sampler=self.sampler), k=k or 0, chat=False,
                                        proposer=self.proposer, verifier=self.verifier, grammar=self.grammar,
                                        tree=self.tree)
        finally:
            self.gen.pooled_acceptance = saved
        s = out.stats
        return Run(
            token_ids=out.token_ids, total_s=s["total_s"], steps=[(e, n) for e, _, _, n in s["steps"]],
            peak_rss_bytes=mem.peak, cuda_peak_bytes=mem.cuda_peak, target_passes=s["target_passes"],
            drafted=s["drafted_tokens"], accepted=s["accepted_tokens"],
            drafted_per_position=s["drafted_per_position"], accepted_per_position=s["accepted_per_position"],
            by_source=s["by_source"], tree=s["tree"] if s["tree"]["passes"] else {},
            draft_s=s["draft_s"], verify_s=s["verify_s"], prefill_s=s["prefill_s"],
        )


class HFMethod:
    """transformers' generate. hf-assisted keeps transformers' own defaults for the assistant
    (its heuristic number of assistant tokens); hf-pld uses prompt_lookup_num_tokens = k."""

    backend = "transformers"
    takes_auto = False

    def __init__(self, name: str, model, tokenizer, eos_token_ids, assistant=None):
        self.name = name
        self.takes_k = name == "hf-pld"
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


class LlamaCppMethod:
    """llama-cpp-python's own generation on the target's GGUF: `llamacpp` is plain decoding,
    `llamacpp-pld` its prompt-lookup speculative decoding (LlamaPromptLookupDecoding, with
    num_pred_tokens = k). Sampling is llama.cpp's own sampler chain with our temperature / top-k /
    top-p / min-p; greedy at temperature 0."""

    backend = "llamacpp"
    takes_auto = False

    def __init__(self, name: str, gguf, eos_token_ids):
        from ..models.backends.llamacpp import load_llama

        self.name = name
        self.takes_k = name == "llamacpp-pld"
        self.eos = set(eos_token_ids)
        # Its speculative generation reads the logits of every position, so it needs logits_all
        # from the start (the logits array is sized by it; prompts past n_batch overflowed it).
        self.llm = load_llama(gguf, logits_all=name == "llamacpp-pld")
        if name == "llamacpp-pld":
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            self.llm.draft_model = LlamaPromptLookupDecoding(num_pred_tokens=4)

    def run(self, prompt_ids, params, k) -> Run:
        llm = self.llm
        if self.name == "llamacpp-pld":
            llm.draft_model.num_pred_tokens = k
        llm.reset()
        if params.seed is not None:
            llm.set_seed(params.seed)
        with PeakMemory() as mem:
            tokens, steps, total = ggml_thread.run(self._generate, prompt_ids, params)
        return Run(token_ids=tokens, total_s=total, steps=steps, peak_rss_bytes=mem.peak)

    def _generate(self, prompt_ids, params) -> tuple[list[int], list[tuple[float, int]], float]:
        llm = self.llm
        tokens: list[int] = []
        steps: list[tuple[float, int]] = []
        start = time.perf_counter()
        for token in llm.generate(prompt_ids, temp=0.0 if params.greedy else params.temperature,
                                  top_k=params.top_k or 0, top_p=params.top_p, min_p=params.min_p,
                                  repeat_penalty=1.0):
            if token in self.eos and not params.ignore_eos:
                break
            tokens.append(int(token))
            steps.append((time.perf_counter() - start, 1))
            if len(tokens) >= params.max_new_tokens:
                break
        return tokens, steps, time.perf_counter() - start


def make_method(name: str, gen: Engine, target_spec: str, target_model, tokenizer, draft_model,
                assistant=None, dtype: str = "auto"):
    """One bench method over the loaded models; raises with the reason when it cannot run here.
    `assistant`: hf-assisted's draft (default: draft_model), a transformers model or None."""
    from ..models.loader import eos_ids
    from ..models.registry import resolve

    if name in ENGINE_METHODS:
        return EngineMethod(name, gen)
    if name in BASELINE_METHODS:
        return baseline_method(name, gen, target_spec, target_model, tokenizer, dtype)
    if name in HF_METHODS:
        hf_target = torch_model(target_model)
        hf_draft = torch_model(assistant if assistant is not None else draft_model)
        if hf_target is None or (name == "hf-assisted" and hf_draft is None):
            raise ValueError(f"{name} runs transformers' generate, which needs transformers models (hf: backend)")
        return HFMethod(name, hf_target, tokenizer, eos_ids(hf_target, tokenizer), assistant=hf_draft)
    gguf = peer_gguf(target_spec, target_model)
    if gguf is None:
        raise ValueError(f"{name} needs the target as a GGUF file; '{target_spec}' is not one")
    if name in LLAMA_SERVER_METHODS:
        from .llama_server import LlamaServerMethod

        # Its draft: the GGUF our draft runs where it is a llama.cpp one (a shortlisted draft's
        # full-vocabulary source), else the default draft's.
        draft_gguf = getattr(draft_model, "gguf", None) or getattr(draft_model, "source_gguf", None)
        return LlamaServerMethod(name, gguf, draft_gguf or resolve("default", "draft").gguf)
    return LlamaCppMethod(name, gguf, eos_ids(target_model, tokenizer))


def peer_gguf(target_spec: str, target_model):
    """The GGUF llama.cpp's own loops run beside our target: the very file a llama.cpp target runs;
    for a target on another runtime (torch, onnxruntime), its model's GGUF requantised to Q4_0, the
    format llama.cpp decodes fastest on a CPU (llamacpp-shipped runs the file as shipped); None when
    the model has no GGUF."""
    from ..models.registry import resolve
    from ..models.spec import ModelSpec

    if backend_name(target_model) == "llamacpp":
        return target_model.gguf
    source = resolve(ModelSpec.parse(target_spec).source, "target").gguf
    if source is None:
        return None
    from ..models.backends.llamacpp import requantized

    return requantized(source, "q4_0")


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
    """Process RSS high-water mark during a block, and CUDA peak allocation.

    On Linux the kernel keeps the high-water mark itself (VmHWM), and writing 5 to
    /proc/self/clear_refs resets it to the current RSS: nothing runs beside the decoder. Elsewhere a
    thread samples RSS every 5 ms; on a small CPU that thread takes turns on the cores the decoder
    uses (docs/benchmarking.md)."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.peak = 0
        self.cuda_peak: int | None = None
        self._stop = threading.Event()
        self._proc = psutil.Process()
        self._thread = None

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakMemory":
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self.peak = self._proc.memory_info().rss
        if not reset_high_water_mark():
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self.peak = max(self.peak, high_water_mark() or 0, self._proc.memory_info().rss)
        if torch.cuda.is_available():
            self.cuda_peak = int(torch.cuda.max_memory_allocated())


def reset_high_water_mark() -> bool:
    """Reset the kernel's RSS high-water mark of this process to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return high_water_mark() is not None


def high_water_mark() -> int | None:
    """The kernel's RSS high-water mark of this process in bytes (VmHWM), None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def baseline_method(name: str, gen: Engine, target_spec: str, target_model, tokenizer, dtype: str = "auto"):
    """plain-torch (at the bench's dtype) or llamacpp-shipped for the target's model: the default
    model only, whose torch checkpoint and shipped GGUF the cache holds."""
    from ..models.generator import build_generator
    from ..models.loader import eos_ids, load
    from ..models.registry import resolve
    from ..models.spec import ModelSpec

    model = "default" if target_spec.strip() == "auto" else ModelSpec.parse(target_spec).source
    if model != "default":
        raise ValueError(f"{name} runs the default model's torch checkpoint or shipped GGUF; the target "
                         f"'{target_spec}' is another model")
    if name == "plain-torch":
        if backend_name(target_model).startswith("torch"):
            return EngineMethod("plain", gen, label=name)
        torch_target, tok = load("hf:default", "target", dtype)
        return EngineMethod("plain", build_generator(torch_target, tok, "none"), label=name)
    method = LlamaCppMethod("llamacpp", resolve("default", "target").gguf, eos_ids(target_model, tokenizer))
    method.name = name
    return method
