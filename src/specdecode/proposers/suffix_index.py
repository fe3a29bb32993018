"""A searchable store of token sequences: the longest earlier match of a context's suffix and the
most frequent continuation after it (the lookup behind the `suffix` proposer).

What a suffix tree over the sequences would answer, kept as flat arrays: every position is filed
under the two tokens before it (and the one token before it), so the occurrences of the context's
last two tokens are one dictionary lookup; their match lengths are then extended backwards over
all candidates at once with numpy. The occurrences sharing the longest match are the suffix tree's
node for that suffix; walking their continuations token by token, keeping those that agree with the
most frequent next token, is the walk down its most frequent children (SuffixDecoding, Oliaro et
al., NeurIPS 2025). Each step's share of the occurrences that continue with the chosen token is the
estimated probability that it is right; their running product is the path's.

Bounded by tokens: whole sequences are evicted, least recently useful first (a sequence that just
supplied a continuation moves to the back of the queue), and the arrays are rebuilt when the dead
part outgrows the live one.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

SEPARATOR = -1  # between sequences: no match or continuation crosses it
# The most recent occurrences of the last two tokens that a lookup examines. Frequent pairs (", the")
# have thousands; recent ones are the likelier continuations, and the bound keeps a lookup well
# under a millisecond.
MAX_CANDIDATES = 512
MAX_MATCH = 64  # longer matches say nothing more about the continuation (ArcticInference's tree depth)


@dataclass
class Match:
    length: int  # tokens of the context's suffix matched (0: none)
    tokens: list[int] = field(default_factory=list)  # the continuation, most frequent path
    probs: list[float] = field(default_factory=list)  # estimated probability of the path to each token

    @property
    def score(self) -> float:
        """Expected number of the tokens that are right, by the estimates."""
        return float(sum(self.probs))


class SuffixIndex:
    def __init__(self, max_tokens: int | None = None):
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"the suffix index's bound is a number of tokens >= 1, got {max_tokens}")
        self.max_tokens = max_tokens
        self.buf = np.full(1024, SEPARATOR, dtype=np.int64)
        self.doc = np.full(1024, -1, dtype=np.int64)  # which sequence each position belongs to
        self.n = 0
        self.pairs: dict[tuple[int, int], list[int]] = {}  # (t[i-2], t[i-1]) -> positions i
        self.singles: dict[int, list[int]] = {}  # t[i-1] -> positions i
        self.docs: OrderedDict[int, tuple[int, int]] = OrderedDict()  # live sequences: id -> (start, end)
        self.live_tokens = 0
        self._next_doc = 0

    # -- filling ---------------------------------------------------------------------------------

    def add(self, tokens: list[int]) -> int:
        """Store a whole sequence; returns its id. Evicts the least recently useful sequences
        beyond the bound."""
        doc = self.start()
        self.extend(doc, tokens)
        self._evict()
        return doc

    def start(self) -> int:
        """Begin a sequence that grows with extend() (a request's own context)."""
        doc, self._next_doc = self._next_doc, self._next_doc + 1
        self._append([SEPARATOR], -1)
        self.docs[doc] = (self.n, self.n)
        return doc

    def extend(self, doc: int, tokens: list[int]) -> None:
        """Append tokens to the sequence `doc`, which must be the last one started."""
        start, end = self.docs[doc]
        if end != self.n:
            raise ValueError("only the most recently started sequence can grow")
        if not tokens:
            return
        self._append(tokens, doc)
        buf = self.buf
        prev2, prev1 = (int(buf[end - 2]) if end - 2 >= start else SEPARATOR), (int(buf[end - 1]) if end > start
                                                                                 else SEPARATOR)
        for i, t in enumerate(tokens, start=end):
            if prev1 != SEPARATOR:
                self.singles.setdefault(prev1, []).append(i)
                if prev2 != SEPARATOR:
                    self.pairs.setdefault((prev2, prev1), []).append(i)
            prev2, prev1 = prev1, int(t)
        self.docs[doc] = (start, self.n)
        self.live_tokens += len(tokens)

    def _append(self, tokens: list[int], doc: int) -> None:
        need = self.n + len(tokens) + 1
        if need > len(self.buf):
            size = max(need, 2 * len(self.buf))
            self.buf = np.concatenate([self.buf, np.full(size - len(self.buf), SEPARATOR, dtype=np.int64)])
            self.doc = np.concatenate([self.doc, np.full(size - len(self.doc), -1, dtype=np.int64)])
        self.buf[self.n:self.n + len(tokens)] = tokens
        self.doc[self.n:self.n + len(tokens)] = doc
        self.n += len(tokens)

    def _evict(self) -> None:
        if self.max_tokens is None:
            return
        while self.live_tokens > self.max_tokens and len(self.docs) > 1:
            _, (start, end) = self.docs.popitem(last=False)
            self.doc[start:end] = -1
            self.live_tokens -= end - start
        if self.live_tokens > self.max_tokens:  # one sequence longer than the bound: keep its end
            doc, (start, end) = next(iter(self.docs.items()))
            tail = self.buf[end - self.max_tokens:end].tolist()
            self.docs.clear()
            self.live_tokens = 0
            self._rebuild([tail])
            return
        if self.n > 2 * self.max_tokens + 1024:
            self._rebuild([self.buf[s:e].tolist() for s, e in self.docs.values()])

    def _rebuild(self, sequences: list[list[int]]) -> None:
        bound, self.max_tokens = self.max_tokens, None
        self.__init__(None)
        for seq in sequences:
            self.add(seq)
        self.max_tokens = bound

    # -- searching -------------------------------------------------------------------------------

    def lookup(self, context: list[int], max_len: int, factor: float = 1.0, offset: float = 0.0,
               min_prob: float = 0.1) -> Match:
        """The longest earlier match of context's suffix (up to MAX_MATCH tokens) and the most
        frequent continuation after it: at most max_len tokens, and at most factor * match length +
        offset (a short match predicts a short way), stopping where the path's estimated
        probability falls below min_prob."""
        if max_len <= 0 or not context:
            return Match(0)
        best, cand = self._longest(context)
        if cand is None:
            return Match(0)
        budget = min(max_len, int(factor * best + offset))
        out = Match(best)
        path = 1.0
        for step in range(budget):
            at = cand + step
            at = at[at < self.n]
            following = self.buf[at]
            valid = following != SEPARATOR
            if not valid.any():
                break
            values, counts = np.unique(following[valid], return_counts=True)
            top = counts.max()
            # Ties go to the most recent occurrence's token.
            tied = values[counts == top]
            token = int(tied[0]) if tied.size == 1 else int(following[valid][np.isin(following[valid], tied)][-1])
            # Occurrences that end here count against the continuation, as in a suffix tree
            # (a child's count over its parent's).
            path *= top / following.size
            if path < min_prob:
                break
            out.tokens.append(token)
            out.probs.append(float(path))
            cand = at[following == token] - step
        if out.tokens:
            self._touch(cand)
        return out

    def continuations(self, context: list[int], length: int) -> list[list[int]]:
        """What followed each occurrence of the longest match of context's suffix (up to `length`
        tokens each, stopping at a sequence's end), most recent first: a tree proposal merges them."""
        best, cand = self._longest(context)
        if cand is None or length <= 0:
            return []
        out = []
        for start in cand[::-1].tolist():
            cont = self.buf[start: min(start + length, self.n)].tolist()
            if SEPARATOR in cont:
                cont = cont[: cont.index(SEPARATOR)]
            out.append(cont)
        return out

    def _longest(self, context: list[int]) -> tuple[int, np.ndarray | None]:
        """(match length, positions that follow the occurrences sharing the longest match of the
        context's suffix); (0, None) when there is none."""
        if not context:
            return 0, None
        if len(context) >= 2:
            found = self.pairs.get((int(context[-2]), int(context[-1])))
            matched = 2
        else:
            found = None
        if not found:
            found, matched = self.singles.get(int(context[-1])), 1
        if not found:
            return 0, None
        cand = np.asarray(found[-MAX_CANDIDATES:], dtype=np.int64)
        cand = cand[(self.doc[cand - 1] >= 0) & (cand < self.n) & (self.buf[cand] != SEPARATOR)]
        if cand.size == 0:
            return 0, None
        lengths = np.full(cand.size, matched, dtype=np.int64)
        alive = np.ones(cand.size, dtype=bool)
        tail = np.asarray(context[-MAX_MATCH:], dtype=np.int64)
        for j in range(matched, len(tail)):
            at = cand - 1 - j
            ok = alive & (at >= 0)
            ok[ok] = self.buf[at[ok]] == tail[-1 - j]
            alive &= ok
            if not alive.any():
                break
            lengths += alive
        best = int(lengths.max())
        return best, cand[lengths == best]

    def _touch(self, positions: np.ndarray) -> None:
        """The sequences that supplied a continuation are the most recently useful."""
        for doc in set(self.doc[positions].tolist()):
            if doc in self.docs:
                self.docs.move_to_end(doc)

    def __len__(self) -> int:
        return self.live_tokens
