"""The speculative decoding loop, one request at a time.

The data path, top to bottom in `SpeculativeGenerator.generate`:
    prompt -> prefill the target with all but the last prompt token
    repeat: proposer.propose(k) -> target.forward(last token + drafts) -> probs_from_logits
            -> rejection_sample -> target cache keeps the accepted prefix -> stop checks -> stream
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .adaptive import AdaptiveK, PassCosts, SourceChoice
from .backends.base import ModelRunner
from .load_policy import AcceptanceTracker
from .proposers import Proposer
from .rejection import rejection_sample
from .sampling import InvalidParameter, SamplingParams, probs_from_logits
from .textstream import OnToken, TextStream

Prompt = str | Sequence[int] | Sequence[dict]


class RequestError(ValueError):
    """The request cannot be served as given (empty prompt, too long for the context, ...)."""


@dataclass
class StepRecord:
    """One target pass: when it finished (seconds since the request began) and what it emitted."""

    end_s: float
    drafted: int
    accepted: int
    emitted: int


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    target_passes: int = 0  # verification passes (the prefill is not counted)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    # Per position, the sum over passes of the chance that the pass accepted it: c_1 * ... * c_i with
    # c_j = min(1, p(x_j) / q(x_j)) for the drafted x_j. It has the expectation of the realised
    # counts above (the uniforms of the rejection step integrated out) and, sampling, far less noise,
    # and it counts positions after the first rejection too: what `tune` builds its predictions on.
    expected_per_position: list[float] = field(default_factory=list)
    # Source -> [passes, drafted, accepted]: the draft model, the lookup's match lengths (ngram3/2/1),
    # or none (a pass that drafted nothing).
    by_source: dict[str, list[int]] = field(default_factory=dict)
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    ttft_s: float = 0.0
    finish_reason: str = "length"
    steps: list[StepRecord] = field(default_factory=list)

    def record_pass(self, drafted: int, accepted: int, draft_s: float, verify_s: float,
                    chances: Sequence[float] = (), source: str | None = None) -> None:
        """One verification pass that checked `drafted` tokens and accepted `accepted`; chances:
        each draft's min(1, p/q), when known; source: the proposer that drafted them."""
        if source is not None:
            counts = self.by_source.setdefault(source, [0, 0, 0])
            counts[0] += 1
            counts[1] += drafted
            counts[2] += accepted
        self.draft_s += draft_s
        self.verify_s += verify_s
        self.target_passes += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        while len(self.drafted_per_position) < drafted:
            self.drafted_per_position.append(0)
            self.accepted_per_position.append(0)
            self.expected_per_position.append(0.0)
        reach = 1.0
        for i in range(drafted):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += int(i < accepted)
            reach *= chances[i] if len(chances) == drafted else float(i < accepted)
            self.expected_per_position[i] += reach

    def as_dict(self) -> dict:
        decode_s = self.total_s - self.ttft_s
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "target_passes": self.target_passes,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0,
            "mean_accepted_tokens": self.new_tokens / self.target_passes if self.target_passes else 0.0,
            "per_position_acceptance": [
                a / d if d else 0.0 for a, d in zip(self.accepted_per_position, self.drafted_per_position)
            ],
            "drafted_per_position": list(self.drafted_per_position),
            "accepted_per_position": list(self.accepted_per_position),
            "expected_per_position": list(self.expected_per_position),
            "by_source": {s: list(c) for s, c in self.by_source.items()},
            "tokens_per_s": self.new_tokens / self.total_s if self.total_s > 0 else 0.0,
            "decode_tokens_per_s": (self.new_tokens - 1) / decode_s if decode_s > 0 and self.new_tokens > 1 else 0.0,
            "ttft_s": self.ttft_s,
            "prefill_s": self.prefill_s,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "other_s": max(0.0, self.total_s - self.prefill_s - self.draft_s - self.verify_s),
            "total_s": self.total_s,
            "finish_reason": self.finish_reason,
            "steps": [[round(s.end_s, 6), s.drafted, s.accepted, s.emitted] for s in self.steps],
        }


@dataclass
class GenerationOutput:
    text: str
    token_ids: list[int]
    stats: dict
    prompt_token_ids: list[int]
    finish_reason: str


class SpeculativeGenerator:
    """Exact speculative decoding over a target ModelRunner and a Proposer."""

    def __init__(
        self,
        target: ModelRunner,
        tokenizer,
        proposers: dict[str, Proposer],
        default_proposer: str = "draft",
        eos_token_ids: Sequence[int] = (),
    ):
        if default_proposer not in proposers:
            raise ValueError(f"default proposer '{default_proposer}' is not among {sorted(proposers)}")
        self.target = target
        self.tokenizer = tokenizer
        self.proposers = dict(proposers)
        self.default_proposer = default_proposer
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.info: dict = {}  # where the models came from and their dtypes, for reports
        self.auto_k_max = 8  # the largest k that k="auto" may reach
        self.auto_min_confidence = 0.4  # k="auto" drafts no further where the draft's top probability is below this
        self.auto_cost_cap = True  # k="auto" keeps k where it pays at the measured costs (adaptive.py)
        # Learnt from every pass of every request, so a new request starts from what this machine
        # and these models really cost, and from how well each proposer has been doing lately.
        self.pass_costs = PassCosts()
        self.pooled_acceptance: dict[str, AcceptanceTracker] = {}

    @property
    def proposer(self) -> Proposer:
        return self.proposers[self.default_proposer]

    def get_proposer(self, name: str | None) -> Proposer:
        name = name or self.default_proposer
        if name not in self.proposers:
            raise RequestError(f"proposer '{name}' is not available here; loaded: {', '.join(sorted(self.proposers))}")
        return self.proposers[name]

    @classmethod
    def from_pretrained(
        cls,
        target: str = "default",
        draft: str | None = "default",
        proposer: str = "draft",
        dtype: str = "auto",
        **proposer_options,
    ) -> "SpeculativeGenerator":
        """Load models by spec ('default', a directory, a .gguf file, a cached Hugging Face id).

        `draft` is ignored unless proposer == "draft". Every generator can also run "ngram" and
        "none" per request.
        """
        from .loading import load_generator

        return load_generator(target=target, draft=draft, proposer=proposer, dtype=dtype, **proposer_options)

    @classmethod
    def from_models(cls, target_model, tokenizer, proposer: str = "draft", draft_model=None, draft_tokenizer=None,
                    **proposer_options) -> "SpeculativeGenerator":
        """Wrap already-loaded transformers models (e.g. built from a config in a test)."""
        from .loading import build_generator

        return build_generator(target_model, tokenizer, proposer, draft_model, draft_tokenizer, **proposer_options)

    # -- prompt handling -------------------------------------------------------------------------

    def encode(self, prompt: Prompt, chat: bool = True) -> list[int]:
        if isinstance(prompt, str):
            if not prompt.strip():
                raise RequestError("the prompt is empty: give some text or a list of token ids")
            if chat:
                return self._chat_ids([{"role": "user", "content": prompt}])
            return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        items = list(prompt)
        if not items:
            raise RequestError("the prompt is empty: give some text or a list of token ids")
        if all(isinstance(m, dict) for m in items):
            return self._chat_ids(items)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
            raise RequestError("a prompt must be a string, a list of token ids, or a list of chat messages")
        bad = [t for t in items if not 0 <= t < self.target.vocab_size]
        if bad:
            raise RequestError(f"prompt token id {bad[0]} is outside the vocabulary [0, {self.target.vocab_size})")
        return list(items)

    def _chat_ids(self, messages: list[dict]) -> list[int]:
        return chat_ids(self.tokenizer, messages)

    # -- the loop --------------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        k: int | str = 4,
        chat: bool = True,
        on_token: OnToken | None = None,
        proposer: str | None = None,
    ) -> GenerationOutput:
        """Generate a continuation of `prompt` (text, token ids, or chat messages).

        k is the number of tokens drafted per target pass, or "auto" to adapt it per request (see
        adaptive.py); `proposer` overrides the default one for this request. on_token(token_id, text_delta) is called for every emitted token.
        """
        params = params or SamplingParams()
        drafter = self.get_proposer(proposer)
        name = proposer or self.default_proposer
        check_k(k)
        # Under k="auto" a pass drafts from one of the proposer's sources (the hybrid's lookup or
        # draft model, the lookup's match lengths); a plain proposer is its own source.
        sources = getattr(drafter, "sources", {name: drafter})
        auto = self.new_auto(sources) if k == "auto" else None
        costs = self.pass_costs if self.auto_cost_cap else None
        prompt_ids = self.encode(prompt, chat)
        limit = self.target.max_context
        if len(prompt_ids) + 1 > limit:
            raise RequestError(
                f"the prompt has {len(prompt_ids)} tokens but the target's context is {limit}: shorten the prompt"
            )
        generator = params.make_generator()
        stats = GenerationStats(prompt_tokens=len(prompt_ids))
        text = TextStream(self.tokenizer, params.stop, on_token)
        stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.eos_token_ids))

        start = time.perf_counter()
        self.target.reset()
        drafter.start(prompt_ids)  # a draft model prefills here too: part of prefill_s
        # Prefill all but the last prompt token: the loop feeds that one with the first drafts, so
        # every emitted token, the first included, goes through the same rejection step.
        if len(prompt_ids) > 1:
            self.target.forward(prompt_ids[:-1])
        stats.prefill_s = time.perf_counter() - start
        context = list(prompt_ids)
        generated: list[int] = []
        done = False
        while not done:
            # After this step the sequence may hold len(context) + k + 1 tokens.
            room = limit - len(context) - 1
            if room < 0:
                stats.finish_reason = "length"
                break
            t0 = time.perf_counter()
            if auto:
                reach = self.auto_k_max
                available = drafter.available(context, reach) if hasattr(drafter, "available") else {name: reach}
                source, wanted = auto.choose(costs, available)
                step_k = min(wanted, params.max_new_tokens - len(generated) - 1, room)
                proposal = sources[source].propose(context, step_k, params, generator,
                                                   min_confidence=auto.min_confidence)
            else:
                step_k = min(k, params.max_new_tokens - len(generated) - 1, room)
                proposal = drafter.propose(context, step_k, params, generator)
            drafts = proposal.tokens[:step_k]
            source = (proposal.source or (source if auto else name)) if drafts else "none"
            q = None if proposal.probs is None else proposal.probs[: len(drafts)].unsqueeze(0)
            t1 = time.perf_counter()

            # Verify: the last emitted token and all drafts at their positions, in one target pass.
            logits = self.target.forward([context[-1]] + drafts, all_logits=True)
            emitted_tokens, accepted, chances = verify_drafts(logits, drafts, q, params, generator)
            # Commit: the cache keeps the context and the accepted drafts; the last emitted token is
            # fed with the next pass, so everything after is dropped.
            self.target.truncate(len(context) + accepted)
            t2 = time.perf_counter()

            stats.record_pass(len(drafts), accepted, t1 - t0, t2 - t1, chances, source)
            # A pass that first caught the draft model up on many tokens says little of what a
            # drafted token costs: only its verify time is kept.
            self.pass_costs.observe(source, 0 if proposal.caught_up else len(drafts), t1 - t0, 1 + len(drafts), t2 - t1)
            self.pooled(source).update(len(drafts), accepted, chances)
            if auto and drafts:
                auto.update(source, len(drafts), accepted, chances)

            emitted = 0
            for token in emitted_tokens:
                context.append(token)
                emitted += 1
                done = self._emit(token, generated, text, stop_ids, params, stats)
                if done:
                    break
            stats.steps.append(StepRecord(time.perf_counter() - start, len(drafts), accepted, emitted))
            if stats.target_passes == 1:
                stats.ttft_s = stats.steps[-1].end_s

        stats.total_s = time.perf_counter() - start
        stats.new_tokens = len(generated)
        final_text = text.finish()
        return GenerationOutput(
            text=final_text,
            token_ids=generated,
            stats=stats.as_dict(),
            prompt_token_ids=prompt_ids,
            finish_reason=stats.finish_reason,
        )

    def pooled(self, proposer: str) -> AcceptanceTracker:
        """A proposer's acceptance over all recent requests (the prior of a new request's own)."""
        return self.pooled_acceptance.setdefault(proposer, AcceptanceTracker(decay=0.98))

    def new_auto(self, sources: dict[str, Proposer]) -> SourceChoice:
        return SourceChoice({
            source: AdaptiveK(k_max=self.auto_k_max, min_confidence=self.auto_min_confidence,
                              acceptance=AcceptanceTracker(prior=self.pooled(source).conditional))
            for source in sources})

    @staticmethod
    def _emit(token: int, generated: list[int], text: "TextStream", stop_ids: set[int], params: SamplingParams,
              stats: GenerationStats) -> bool:
        """Append one token; True when the request is finished."""
        generated.append(token)
        if token in stop_ids:
            text.push(token, final=True)
            stats.finish_reason = "stop"
            return True
        if text.push(token):
            stats.finish_reason = "stop"
            return True
        if len(generated) >= params.max_new_tokens:
            stats.finish_reason = "length"
            return True
        return False


def check_k(k) -> None:
    if k != "auto" and (not isinstance(k, int) or isinstance(k, bool) or k < 0):
        raise InvalidParameter(f"k must be an integer >= 0 (tokens drafted per step) or 'auto', got {k!r}")


def verify_drafts(logits: torch.Tensor, drafts: list[int], q: torch.Tensor | None, params: SamplingParams,
                  generator: torch.Generator | None) -> tuple[list[int], int, list[float]]:
    """One sequence's rejection step: target logits [1 + len(drafts), V] for the last emitted token
    and each draft, q [1, len(drafts), V] or None. Returns (tokens to emit, drafts accepted, and
    each draft's chance of acceptance min(1, p/q), which `tune` uses: see GenerationStats)."""
    p = probs_from_logits(logits[: len(drafts) + 1], params).unsqueeze(0)
    draft_ids = torch.tensor([drafts], dtype=torch.long)
    tokens, num_accepted = rejection_sample(draft_ids, q, p, generator)
    accepted = int(num_accepted[0])
    chances = []
    if drafts:
        p_x = p[0, : len(drafts)].gather(-1, draft_ids[0].unsqueeze(-1)).squeeze(-1)
        q_x = torch.ones_like(p_x) if q is None else q[0].gather(-1, draft_ids[0].unsqueeze(-1)).squeeze(-1)
        chances = torch.where(q_x > 0, (p_x / q_x.clamp(min=1e-30)).clamp(max=1.0), torch.ones_like(p_x)).tolist()
    return tokens[0, : accepted + 1].tolist(), accepted, chances


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a conversation under the model's chat template, ready for the assistant's turn."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise RequestError("this target model has no chat template: pass chat=False (CLI: --no-chat)")
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
