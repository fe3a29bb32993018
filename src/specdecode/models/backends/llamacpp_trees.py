"""Tree passes over the llama.cpp runner: a sequence id per branch.

A row's tree goes into llama.cpp's batch with each node tagged with the sequence ids of every
branch (leaf) through it, at the position of its depth. The row's own id carries its first branch;
each other branch borrows an id no row holds, which first sees the row's cache (`seq_cp`: cell
metadata, nothing copied). llama.cpp masks a token's attention by the first of its ids and by
position, so a node sees the row's cache, its ancestors and itself, never a sibling's branch. After
verification `prune` keeps the accepted path under the row's id: the cells of a branch through the
deepest kept node, up to its depth, are exactly that path. Then the borrowed ids go back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class TreePasses:
    """The tree half of LlamaCppRunner (base.Runner's `trees`): it holds seq, lengths, _spare (ids a
    tree pass may lend), _tree (the pass waiting for prune), _ctx, _lib, _n_batch and _decode."""

    def _forward_tree(self, feeds: list[list[int]], parents: list[list[int]]) -> list[torch.Tensor]:
        if len(parents) != len(feeds):
            raise ValueError(f"expected parents for {len(feeds)} rows, got {len(parents)}")
        trees = [TreeRow.of(b, self.lengths[b], feed, up) for b, (feed, up) in enumerate(zip(feeds, parents))]
        lent = sum(len(t.leaves) - 1 for t in trees)
        if lent > len(self._spare):
            raise ValueError(f"this tree pass has {lent} branches beyond one a row, and the llama.cpp runner "
                             f"lends at most {len(self._spare)}: fewer branches")
        if any(len(feed) > self._n_batch for feed in feeds):
            raise ValueError(f"a row's tree has more than {self._n_batch} tokens, llama.cpp's batch")
        for t in trees:
            t.seqs = [self.seq[t.row]] + [self._spare.pop() for _ in t.leaves[1:]]
            for s in t.seqs[1:]:  # a branch sees the row's cache
                self._lib.llama_memory_seq_cp(self._ctx.memory, self.seq[t.row], s, -1, -1)
        self._tree = trees
        try:
            return self._decode([(b, feed) for b, feed in enumerate(feeds)], False, trees=trees)
        except Exception:
            self._end_tree()
            raise

    def prune(self, keep: list[list[int]]) -> None:
        """After a tree pass: row b keeps the fed tokens keep[b] (indices into its feed, a path from
        its first token down), the others are dropped."""
        if self._tree is None:
            raise RuntimeError("prune() follows a forward() with parents")
        if len(keep) != len(self._tree):
            raise ValueError(f"expected a path for each of {len(self._tree)} rows, got {len(keep)}")
        for t, kept in zip(self._tree, keep):
            t.check_path(kept)
        memory, trees = self._ctx.memory, self._tree
        for t, kept in zip(trees, keep):
            own, end = self.seq[t.row], t.start + len(kept)
            # The cells of any branch through the deepest kept node, up to its depth, are the path.
            branch = t.seqs[t.through[kept[-1]][0]] if kept else own
            if branch == own:
                self._lib.llama_memory_seq_rm(memory, own, end, -1)
            else:
                self._lib.llama_memory_seq_rm(memory, own, t.start, -1)
                self._lib.llama_memory_seq_cp(memory, branch, own, t.start, end)
            self.lengths[t.row] = end
        self._end_tree(keep_rows=True)

    def _end_tree(self, keep_rows: bool = False) -> None:
        """The lent ids go back (their cells with them); without keep_rows the rows drop the pass too."""
        for t in self._tree or []:
            if not keep_rows:
                self._lib.llama_memory_seq_rm(self._ctx.memory, self.seq[t.row], t.start, -1)
            for s in t.seqs[1:]:
                self._lib.llama_memory_seq_rm(self._ctx.memory, s, -1, -1)
                self._spare.append(s)
        self._tree = None

    def _drop_tree(self, drop: list[int]) -> list[int]:
        """rollback(drop) after a tree pass not pruned: a row's fed tokens count as its last ones and
        may only be dropped whole; what is left of drop is for the tokens before them."""
        if self._tree is None:
            return drop
        if any(d < len(t.parents) for t, d in zip(self._tree, drop)):
            raise ValueError("after a tree pass, prune() says which fed tokens each row keeps")
        drop = [d - len(t.parents) for t, d in zip(self._tree, drop)]
        self._end_tree()
        return drop


@dataclass
class TreeRow:
    """One row's part of a tree pass: where it starts, each fed token's depth and the branches
    (leaves, numbered in feed order) through it, the first being one of its own descendants'; and
    the sequence id of each branch once lent (branch 0: the row's own)."""

    row: int
    start: int
    parents: list[int]
    depth: list[int]
    through: list[list[int]]
    leaves: list[int]
    seqs: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, row: int, start: int, feed: list[int], parents: list[int]) -> "TreeRow":
        if len(parents) != len(feed):
            raise ValueError(f"row {row}: {len(feed)} tokens but {len(parents)} parents")
        depth: list[int] = []
        for j, parent in enumerate(parents):
            if not -1 <= parent < j:
                raise ValueError(f"row {row}: token {j}'s parent must be an earlier token or -1, got {parent}")
            depth.append(depth[parent] + 1 if parent >= 0 else 0)
        inner = {p for p in parents if p >= 0}
        leaves = [j for j in range(len(parents)) if j not in inner]
        number = {leaf: n for n, leaf in enumerate(leaves)}
        through: list[list[int]] = [[] for _ in parents]
        for j in reversed(range(len(parents))):  # a node's descendants come after it
            if j in number:
                through[j].append(number[j])
            through[j].sort()
            if parents[j] >= 0:
                through[parents[j]].extend(through[j])
        return cls(row, start, list(parents), depth, through, leaves)

    def check_path(self, kept: list[int]) -> None:
        """kept must run from a first-level token down, each the child of the one before it."""
        if any(not 0 <= i < len(self.parents) for i in kept) or \
                any(self.parents[i] != (kept[n - 1] if n else -1) for n, i in enumerate(kept)):
            raise ValueError(f"row {self.row}: keep {kept} is not a path from the tree's first level down")
