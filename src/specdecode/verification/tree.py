"""Tree drafting: a proposal may be a tree of candidate continuations, scored in one target pass and
verified by walking it from the root, exactly.

A tree is its nodes in topological order: tokens[i] and parents[i] (the index of the node it
follows, -1 for the row's last context token). The target scores the row's last token and every
node in one pass (tree attention: each node sees the context and its own ancestors, at the
position of its depth), so p at node i is the target's distribution of what follows the path to i.

The walk (SpecInfer's multi-candidate rule, Miao et al. 2024): standing at a node whose target
distribution is r = p, try its children in order. Child c carries the distribution q_c it was drawn
from, given everything drafted before it (sampled from the draft: the draft's q; a deterministic
candidate, such as a lookup's continuation or the draft's second choice: one-hot). Accept c with
probability min(1, r(x_c) / q_c(x_c)); on acceptance emit x_c and stand at c. On rejection
r <- normalize(max(0, r - q_c)) and try the next child; when every child is rejected, emit one token
from r, and when a node has no children, one token from its p (the bonus). Each try is one
speculative-sampling step of r against q_c, which emits a sample of r; by induction over the tries
and the depths the emitted tokens follow the target exactly, for any tree shape, duplicated
siblings and q = 0 where p > 0 included. For a deterministic candidate the residual is r with x_c
removed: forgetting to remove it, or drawing the final token from p instead of r, is wrong
(tests/test_tree.py keeps both as negative controls).

Proposers put the chain they would draft anyway first (nodes 0..chain-1, each the first child of
the one before: a lookup's latest or most frequent continuation, the draft model's samples), then
the branches, so a tree accepts at least what its chain would; `trim` keeps the chain and adds branches while the expected
extra tokens pay for the wider pass at the measured verify cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..sampling.params import sample_from
from .draws import uniform_scalar

Residual = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def exact_residual(r: torch.Tensor, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, r - q)); r itself where rounding left nothing (r <= q everywhere means
    r = q, and the rejection that led here had probability zero)."""
    rest = (r - q).clamp(min=0)
    total = float(rest.sum())
    return rest / total if total > 0 else r


def children(parents: Sequence[int]) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        kids.setdefault(parent, []).append(i)
    return kids


def depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node: 0 for a child of the root (it goes at the row's next position)."""
    out: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i}'s parent must be an earlier node or -1 (the root), got {parent}")
        out.append(0 if parent < 0 else out[parent] + 1)
    return out


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """The nodes from the root's child down to `node` (included); [] for the root (-1)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def chain_length(parents: Sequence[int] | None, n: int) -> int:
    """How many leading nodes form a chain from the root (all n when there are no parents)."""
    if parents is None:
        return n
    m = 0
    while m < len(parents) and parents[m] == m - 1:
        m += 1
    return m


def walk(tokens: Sequence[int], parents: Sequence[int], probs: torch.Tensor | None, target_probs: torch.Tensor,
         generator: torch.Generator | None = None, residual: Residual = exact_residual) -> tuple[list[int], list[int]]:
    """Verify one tree: target_probs [1 + n, V] (row 0: the root's position, row i + 1: node i's),
    probs [n, V] the distribution each node was drawn from (None: every node deterministic).
    Returns (emitted tokens: the accepted path's then one more, the accepted node indices)."""
    kids = children(parents)
    emitted: list[int] = []
    path: list[int] = []
    node = -1
    while True:
        p = target_probs[node + 1].double()
        r = p
        accepted = None
        for c in kids.get(node, []):
            x = int(tokens[c])
            if probs is None:
                q = torch.zeros_like(r)
                q[x] = 1.0
            else:
                q = probs[c].double()
            # u < r(x) / q(x) written without the division: q(x) = 0 < r(x) always accepts.
            if uniform_scalar(generator) * float(q[x]) < float(r[x]):
                accepted = c
                break
            r = residual(r, q, p)
        if accepted is None:
            emitted.append(int(sample_from(r, generator)))
            return emitted, path
        emitted.append(int(tokens[accepted]))
        path.append(accepted)
        node = accepted


def walk_invariant(tokens: Sequence[int], parents: Sequence[int], target_probs: torch.Tensor,
                   pick: Callable[[torch.Tensor, int], int]) -> tuple[list[int], list[int]]:
    """The drafter-invariant rule over a tree: at each node the target's own token is
    pick(p, depth) (its race winner under the position's shared noise); the child drafting that
    token is accepted, and where no child does, that token is emitted. The output is the target's
    sample whatever the tree holds."""
    kids = children(parents)
    emitted: list[int] = []
    path: list[int] = []
    node = -1
    while True:
        y = pick(target_probs[node + 1], len(path))
        emitted.append(y)
        nxt = next((c for c in kids.get(node, []) if int(tokens[c]) == y), None)
        if nxt is None:
            return emitted, path
        path.append(nxt)
        node = nxt


def trie(continuations: Sequence[Sequence[int]], depth: int, budget: int,
         chain: Sequence[int] | None = None) -> tuple[list[int], list[int], list[float]]:
    """Merge continuations (most recent first) into a tree of at most `budget` nodes and `depth`
    levels: `chain` first (the proposer's own chain, which must be one of the continuations' starts;
    None: the most frequent path, ties to the most recent), then the other branches, most frequent
    first. Returns (tokens, parents, shares), a node's share being the fraction of its parent's
    continuations that go through it."""
    count: dict[tuple[int, ...], int] = {}
    rank: dict[tuple[int, ...], int] = {}
    for order, cont in enumerate(continuations):
        for d in range(min(depth, len(cont))):
            key = tuple(cont[: d + 1])
            count[key] = count.get(key, 0) + 1
            rank.setdefault(key, order)
    if not count or budget <= 0:
        return [], [], []
    below: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for key in count:
        below.setdefault(key[:-1], []).append(key)
    for keys in below.values():
        keys.sort(key=lambda k: (-count[k], rank[k]))
    total = len(continuations)

    def share(key):
        return count[key] / (count[key[:-1]] if len(key) > 1 else total)

    first = chain
    chain: list[tuple[int, ...]] = []
    at: tuple[int, ...] = ()
    while at in below and len(chain) < min(depth, budget):
        if first is not None:
            if len(at) >= len(first) or at + (int(first[len(at)]),) not in count:
                break
            at = at + (int(first[len(at)]),)
        else:
            at = below[at][0]
        chain.append(at)
    # Branches by how many continuations pass through them: a child never outnumbers its parent,
    # so taking them in that order (shallower first on ties) keeps every parent before its children.
    rest = sorted((k for k in count if k not in set(chain)), key=lambda k: (-count[k], len(k), rank[k]))
    chosen = set(chain)
    extra: list[tuple[int, ...]] = []
    for key in rest:
        if len(chain) + len(extra) >= budget:
            break
        if len(key) == 1 or key[:-1] in chosen:
            chosen.add(key)
            extra.append(key)
    extra.sort(key=lambda k: (len(k), -count[k], rank[k]))
    nodes = chain + extra
    index = {key: i for i, key in enumerate(nodes)}
    return ([key[-1] for key in nodes], [index.get(key[:-1], -1) for key in nodes], [share(key) for key in nodes])


def trim(parents: Sequence[int], shares: Sequence[float], acceptance: Sequence[float],
         cost: Callable[[int], float] | None) -> list[int]:
    """The nodes to score: the leading chain, then the branches whose expected tokens pay for the
    wider pass. A node is estimated to be on the accepted path with its parent's chance times the
    row's acceptance at its depth times its share; cost(w) is the pass over w tokens (None: no
    costs measured yet, every node is kept)."""
    n = len(parents)
    chain = chain_length(parents, n)
    if cost is None or chain == n:
        return list(range(n))
    level = depths(parents)
    reach: list[float] = []
    for i in range(n):
        c = float(acceptance[level[i]]) if level[i] < len(acceptance) else float(acceptance[-1])
        reach.append((1.0 if parents[i] < 0 else reach[parents[i]]) * min(c, 0.999) * shares[i])
    kept = set(range(chain))
    gain = 1.0 + sum(reach[:chain])
    best, best_rate = set(kept), gain / max(cost(1 + chain), 1e-12)
    for i in sorted(range(chain, n), key=lambda j: -reach[j]):
        if parents[i] not in kept and parents[i] >= 0:
            continue
        kept.add(i)
        gain += reach[i]
        rate = gain / max(cost(1 + len(kept)), 1e-12)
        if rate > best_rate:
            best, best_rate = set(kept), rate
    return sorted(best)


def subtree(tokens: list[int], parents: list[int], keep: list[int]) -> tuple[list[int], list[int]]:
    """The nodes `keep` (sorted, closed under parents) as a tree of their own."""
    index = {old: new for new, old in enumerate(keep)}
    return [tokens[i] for i in keep], [index[parents[i]] if parents[i] >= 0 else -1 for i in keep]
