"""Rows one after another: the Runner protocol over one single-sequence runner per row.

For backends without a batched pass (the static-cache torch runner, whose compiled one-token step
has fixed shapes). The engine sees a batch like any other; the step's cost grows with the rows.
"""

from __future__ import annotations

import torch

from .base import SequenceRunner


class SerialRunner:
    def __init__(self, first: SequenceRunner):
        self.first = first  # kept for the next row, so a one-row engine reuses one cache
        self.vocab_size = first.vocab_size
        self.max_context = first.max_context
        self.backend = first.backend
        self.runners: list[SequenceRunner] = []
        self.spare: list[SequenceRunner] = [first]

    @property
    def model(self):
        return getattr(self.first, "model", None)

    @property
    def rows(self) -> int:
        return len(self.runners)

    def length(self, row: int) -> int:
        return self.runners[row].length

    def add_rows(self, prefix: list[int], count: int = 1) -> None:
        for _ in range(count):
            runner = self.spare.pop() if self.spare else self.first.spawn()
            runner.reset()
            if prefix:
                runner.forward(prefix)
            self.runners.append(runner)

    def forward(self, feeds: list[list[int]], last_only: bool = False) -> list[torch.Tensor]:
        if len(feeds) != self.rows:
            raise ValueError(f"expected {self.rows} rows, got {len(feeds)}")
        return [runner.forward(feed, all_logits=not last_only) if feed else torch.zeros((0, self.vocab_size))
                for runner, feed in zip(self.runners, feeds)]

    def rollback(self, drop: list[int]) -> None:
        for runner, d in zip(self.runners, drop):
            if d:
                runner.truncate(runner.length - d)

    def remove_rows(self, rows: list[int]) -> None:
        gone = set(rows)
        self.spare += [r for b, r in enumerate(self.runners) if b in gone]
        self.runners = [r for b, r in enumerate(self.runners) if b not in gone]
