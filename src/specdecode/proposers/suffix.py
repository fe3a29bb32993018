"""Suffix decoding: propose the most frequent continuation of the longest match of the context's
suffix, in the request's own prompt and output and in what recent requests generated.

Prompt lookup (ngram) only sees this request and only its latest match. Traffic that repeats
across requests (agent loops emitting similar tool calls, extraction into one JSON schema, code
edits that restate files, multi-turn chats) is where speculation pays most, and a memory of recent
outputs finds it (SuffixDecoding, Oliaro et al., NeurIPS 2025; vLLM's `method: suffix`). No draft
model runs, so on a CPU a proposal costs a lookup.

Each pass looks in two indexes (proposers/suffix_index.py): the request's own (prompt + output so far) and
the shared memory of recent outputs (bounded by tokens, least recently useful evicted), and takes
the continuation with the higher expected number of right tokens. How far it drafts follows the
match: at most `factor` x match length + `offset` tokens, and only while the continuation's
estimated probability (the share of earlier occurrences that continued that way) stays above
`min_prob`; k caps it. Deterministic, so q is one-hot and exactness is the usual rule.

Memories are per tenant: requests whose `tenant` is None share one; a server that keeps tenants
apart gives each client its own, and a request with `remember` off uses none (drafts never change
what is sampled, but how fast a reply comes can reveal that another client's text matched).

For k="auto" each match-length band is its own source (suffix1, suffix2, suffix4, suffix8,
suffix16: matches of 1, 2-3, 4-7, 8-15 and 16+ tokens), with its own acceptance, like the lookup's
n-gram sizes: a 16-token match is right far more often than a one-token one.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict

from .suffix_index import Match, SuffixIndex
from ..verification.tree import trie
from .base import Proposal

BANDS = (16, 8, 4, 2, 1)
PROMPT_TAIL = 32  # prompt tokens kept before each remembered output
MAX_TENANTS = 256  # separate memories kept at once (least recently used tenants dropped)


def memories_for(proposers: dict, memories: OrderedDict):
    """Run with the generator's suffix proposer reading and feeding `memories` (a no-op without
    one): a benchmark keeps each method's memory apart."""
    suffix = proposers.get("suffix")
    return suffix.using(memories) if suffix is not None else contextlib.nullcontext()


def band(match_length: int) -> str:
    return f"suffix{next(b for b in BANDS if match_length >= b)}"


class SuffixProposer:
    name = "suffix"
    uses_draft_model = False
    sources = tuple(f"suffix{b}" for b in BANDS)

    def __init__(self, memory_tokens: int = 100_000, factor: float = 1.0, offset: float = 0.0,
                 min_prob: float = 0.1, remember_prompts: bool = False):
        if not isinstance(memory_tokens, int) or isinstance(memory_tokens, bool) or memory_tokens < 0:
            raise ValueError(f"the suffix memory is a number of tokens >= 0 (0: no memory across requests), got "
                             f"{memory_tokens!r}")
        if factor <= 0 or not 0 <= min_prob <= 1:
            raise ValueError(f"suffix drafting needs factor > 0 and 0 <= min_prob <= 1, got factor={factor}, "
                             f"min_prob={min_prob}")
        self.memory_tokens = memory_tokens
        self.factor, self.offset, self.min_prob = factor, offset, min_prob
        self.remember_prompts = remember_prompts
        self.memories: OrderedDict[str | None, SuffixIndex] = OrderedDict()
        self.local: dict[int, tuple[SuffixIndex, int]] = {}  # request id -> (its index, its sequence id)
        self._last: dict[int, tuple[int, int, Match, bool]] = {}  # request id -> the last lookup
        self.counters = {"lookups": 0, "own_hits": 0, "memory_hits": 0}

    # -- rows in and out -------------------------------------------------------------------------

    def join(self, rows) -> None:
        for row in rows:
            self._own(row)

    def leave(self, rows) -> None:
        """A row's output, after its prompt's last PROMPT_TAIL tokens (or its whole prompt if
        remember_prompts), goes into its tenant's memory."""
        for row in rows:
            self.local.pop(row.id, None)
            self._last.pop(row.id, None)
            memory = self.memory(row.tenant) if row.remember else None
            if memory is None:
                continue
            output = row.context[len(row.prompt_ids):]
            if len(output) < 2:
                continue
            # The prompt's end goes in with the output: how answers begin after an instruction
            # ("... as JSON:") is what the next request with that instruction needs first.
            before = len(row.prompt_ids) if self.remember_prompts else min(PROMPT_TAIL, len(row.prompt_ids))
            memory.add(list(row.context[len(row.prompt_ids) - before:]))

    def clear(self) -> None:
        self.local.clear()
        self._last.clear()

    def memory(self, tenant: str | None) -> SuffixIndex | None:
        if not self.memory_tokens:
            return None
        if tenant not in self.memories:
            self.memories[tenant] = SuffixIndex(self.memory_tokens)
            while len(self.memories) > MAX_TENANTS:
                self.memories.popitem(last=False)
        self.memories.move_to_end(tenant)
        return self.memories[tenant]

    @contextlib.contextmanager
    def using(self, memories: OrderedDict):
        """Read and feed these memories for a while (a benchmark keeps each method's apart, so that
        no method drafts from another's answer to the same prompt)."""
        saved, self.memories = self.memories, memories
        try:
            yield self
        finally:
            self.memories = saved

    def forget(self) -> None:
        """Empty every memory (between benchmark runs that must not see each other's outputs)."""
        self.memories.clear()

    @property
    def memory_size(self) -> int:
        """Tokens held across all memories."""
        return sum(len(m) for m in list(self.memories.values()))

    def behind(self, row) -> int:
        return 0

    # -- drafting --------------------------------------------------------------------------------

    def reach(self, row, k: int) -> dict[str, int]:
        match, _ = self._lookup(row, k)
        reach = {source: 0 for source in self.sources}
        if match.tokens:
            reach[band(match.length)] = len(match.tokens)
        return reach

    def propose(self, rows, plans) -> list[Proposal]:
        out = []
        for row, plan in zip(rows, plans):
            k, budget = plan.k, plan.nodes
            match, from_memory = self._lookup(row, k)
            if k > 0:
                self.counters["lookups"] += 1
                if match.tokens:
                    self.counters["memory_hits" if from_memory else "own_hits"] += 1
            source = band(match.length) if match.tokens else None
            if budget and match.tokens:
                out.append(self._tree(row, match, k, budget, source))
            else:
                out.append(Proposal(tokens=match.tokens[:k], source=source))
        return out

    def _tree(self, row, match: Match, k: int, budget: int, source: str) -> Proposal:
        """The continuations of every occurrence of the longest match, in the row's own index and
        in its memory, merged into a tree no deeper than the chain the lookup found (its length
        already follows the match length and the path's estimated probability). Both indexes
        count: where an answer's format comes from the memory and its values from the prompt
        (extraction), the two disagree exactly where a second candidate pays."""
        depth = min(k, len(match.tokens))
        continuations = []
        for index in (self._own(row), self.memory(row.tenant) if row.remember else None):
            if index is not None and len(index):
                continuations += index.continuations(row.context, depth)
        tokens, parents, shares = trie(continuations, depth, budget, chain=match.tokens[:depth])
        return Proposal(tokens=tokens, source=source, parents=parents, shares=shares)

    def _own(self, row) -> SuffixIndex:
        """The row's own index, brought up to date with its context."""
        if row.id not in self.local:
            index = SuffixIndex()
            self.local[row.id] = (index, index.start())
        index, doc = self.local[row.id]
        if len(index) < len(row.context):
            index.extend(doc, row.context[len(index):])
        return index

    def _lookup(self, row, k: int) -> tuple[Match, bool]:
        """The better of the row's own match and its memory's; (match, from the memory)."""
        if k <= 0:
            return Match(0), False
        last = self._last.get(row.id)
        if last is not None and last[0] == len(row.context) and k <= last[1]:
            # reach() asked for more at this position already: the shorter walk is its prefix.
            match = last[2]
            return Match(match.length, match.tokens[:k], match.probs[:k]), last[3]
        args = (k, self.factor, self.offset, self.min_prob)
        best, from_memory = self._own(row).lookup(row.context, *args), False
        memory = self.memory(row.tenant) if row.remember else None
        if memory is not None and len(memory):
            other = memory.lookup(row.context, *args)
            if other.score > best.score:
                best, from_memory = other, True
        self._last[row.id] = (len(row.context), k, best, from_memory)
        return best, from_memory
