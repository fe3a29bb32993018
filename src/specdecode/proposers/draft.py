"""A smaller model of the same vocabulary drafts tokens autoregressively with its own KV cache."""

from __future__ import annotations

import torch

from ..backends.base import ModelRunner
from ..sampling import SamplingParams, pad_vocab, probs_from_logits, sample_from
from .base import Proposal


class DraftModelProposer:
    """Draft k tokens by sampling from q with the request's own sampling params.

    The draft's cache keeps whatever it has processed; on each call the part that still agrees
    with the context is kept and the rest dropped, so rejected drafts roll back and a fully
    accepted block (whose last draft the draft model never processed) is fed first.

    context_window: the draft model sees only the last N prompt tokens (and everything after them).
    Its prefill is paid before the first token, and on a CPU it is not cheap: the llama.cpp Q4_0
    0.5B draft prefills 97 tokens/s built for AVX2 and 169 for AVX-512, against ~150 for the bf16
    1.5B target, so a ~700-token Spec-Bench summary or retrieval prompt costs 4-7 s of draft prefill,
    and on short answers the whole prompt can cost more than the drafts save. A draft guesses the
    next few tokens mostly from the last few hundred; which tokens it proposes may depend on
    anything, so this changes acceptance, never the output distribution.
    """

    name = "draft"

    def __init__(self, runner: ModelRunner, target_vocab: int, context_window: int | None = None):
        if runner.vocab_size > target_vocab:
            raise ValueError(f"draft vocabulary {runner.vocab_size} is larger than the target's {target_vocab}")
        check_context_window(context_window)
        self.runner = runner
        self.target_vocab = target_vocab
        self.context_window = context_window or None
        self.offset = 0  # where in the context the draft's cache begins (the window's start)
        self.cached: list[int] = []  # tokens in the draft's KV cache: context[offset:offset + len]
        self.stable = 0  # prefix of `cached` known to be verified context

    def start(self, prompt_ids: list[int]) -> None:
        # Prefill with the target's prefill, so that a draft pass measures drafting alone.
        self.runner.reset()
        window = self.context_window
        self.offset = max(0, len(prompt_ids) - window) if window else 0
        self.cached = list(prompt_ids[self.offset:-1])
        if self.cached:
            self.runner.forward(self.cached)
        self.stable = len(self.cached)

    def propose(
        self,
        context: list[int],
        k: int,
        params: SamplingParams,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        if k <= 0:
            return Proposal(tokens=[])
        context = context[self.offset:]  # the draft sees the window as if it were the whole text
        keep = common_prefix(self.cached, context, start=min(self.stable, len(self.cached)))
        keep = min(keep, len(context) - 1)  # the last token must be fed to get the next logits
        self.runner.truncate(keep)
        del self.cached[keep:]
        self.stable = len(context)

        feed = context[keep:]
        fed = len(feed)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        for _ in range(k):
            logits = self.runner.forward(feed)[-1]
            self.cached.extend(feed)
            token, q, sure = next_draft(logits, params, generator, self.target_vocab, min_confidence)
            tokens.append(token)
            if q is not None:
                probs.append(q)
            if not sure:
                break
            feed = [token]
        return Proposal(tokens=tokens, probs=torch.stack(probs) if probs else None, fed=fed)


def next_draft(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None, target_vocab: int,
               min_confidence: float = 0.0) -> tuple[int, torch.Tensor | None, bool]:
    """The next drafted token from the draft's logits [V], the q it was drawn from (None when
    greedy: q is then one-hot), and whether to draft on after it: the draft's top probability at
    this position (at temperature 1) is at least min_confidence.

    The top probability, not the sampled token's: greedy they are the same, but when sampling, a
    draft that spreads its mass draws tokens it gives < 0.4 most of the time even where target and
    draft agree and the next drafts are accepted (temperature 1, Spec-Bench: 85% of k=auto's draft
    passes stopped after one token, while k=2 had 73% of its drafts accepted). How spread the draft
    is says how sure it is; which token the sampler drew is noise.

    The token is kept either way: its forward pass is paid for, and dropping a sampled draft
    because of its own value would keep only some samples of q (see Proposer.propose). Stopping
    after it only decides how many more tokens to draft, which may depend on everything drafted.
    """
    if params.greedy:
        token, q = int(logits.argmax()), None
    else:
        q = pad_vocab(probs_from_logits(logits, params), target_vocab)
        token = int(sample_from(q, generator))
    sure = min_confidence <= 0 or float(torch.softmax(logits.float(), -1).max()) >= min_confidence
    return token, q, sure


def check_context_window(window: int | None) -> None:
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 0):
        raise ValueError(f"the draft's context window is a number of prompt tokens >= 1 (0 or none: the whole "
                         f"prompt), got {window!r}")


def common_prefix(a: list[int], b: list[int], start: int = 0) -> int:
    n = min(len(a), len(b))
    i = start
    while i < n and a[i] == b[i]:
        i += 1
    return i
