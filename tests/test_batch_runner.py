"""BatchRunner: rows with their own lengths in one cache give the same logits as one row alone."""

import torch

import tiny
from specdecode.backends.hf import HFRunner
from specdecode.backends.hf_batch import BatchRunner


def test_ragged_rows_and_rollback_match_single_sequences():
    model = tiny.model()
    batch = BatchRunner(model)
    prefix = [5, 6, 7, 8]
    batch.start_shared(prefix, 3)
    rows = [[1, 2, 3], [9], [4, 4]]
    logits, lengths = batch.forward(rows)
    assert lengths.tolist() == [3, 1, 2]
    # Roll back different amounts per row, then extend again.
    batch.rollback([2, 0, 1])
    kept = [[1], [9], [4]]
    more = [[10, 11], [12, 13, 14], [15]]
    logits2, _ = batch.forward(more)
    for b in range(3):
        single = HFRunner(model)
        expected = single.forward(prefix + kept[b] + more[b], all_logits=True)[-len(more[b]):]
        assert torch.allclose(logits2[b, : len(more[b])], expected, atol=1e-4), b
    assert batch.pos.tolist() == [len(prefix) + 1 + 2, len(prefix) + 1 + 3, len(prefix) + 1 + 1]


def test_rollback_crops_columns_no_row_uses():
    batch = BatchRunner(tiny.model())
    batch.start_shared([1, 2], 2)
    batch.forward([[3, 4, 5], [6]])
    batch.rollback([2, 1])
    assert batch.valid.shape[1] == 3  # only the first new column is still in use
    assert batch.cache.get_seq_length() == 3


def test_rows_join_and_leave_without_disturbing_the_others():
    model = tiny.model()
    batch = BatchRunner(model)
    seqs = {"a": [5, 6, 7, 8, 9, 10], "b": [3], "c": [11, 12]}
    batch.add_row(seqs["a"])
    batch.forward([[1, 2]])
    seqs["a"] += [1, 2]
    batch.add_row(seqs["b"])  # shorter than the columns in use
    batch.add_row([])  # no column at all yet: must not produce NaN for anyone
    seqs["empty"] = []
    logits, _ = batch.forward([[4], [7, 7, 7], [2]])
    seqs["a"] += [4]
    seqs["b"] += [7, 7, 7]
    seqs["empty"] += [2]
    assert torch.isfinite(logits).all()
    batch.rollback([0, 2, 0])
    seqs["b"] = seqs["b"][:-2]
    batch.remove_rows([0])  # "a" leaves
    batch.add_row(seqs["c"])
    order = ["b", "empty", "c"]
    more = [[1, 2], [3], [4, 5, 6]]
    logits, _ = batch.forward(more)
    for i, name in enumerate(order):
        expected = HFRunner(model).forward(seqs[name] + more[i], all_logits=True)[-len(more[i]):]
        assert torch.allclose(logits[i, : len(more[i])], expected, atol=1e-4), name
    assert batch.pos.tolist() == [len(seqs[n]) + len(m) for n, m in zip(order, more)]
    batch.remove_rows([0, 1, 2])
    assert batch.batch_size == 0 and batch.columns == 0


def test_dead_columns_are_compacted():
    model = tiny.model()
    batch = BatchRunner(model)
    batch.add_row(list(range(1, 100)))
    batch.add_row([1, 2, 3])
    batch.forward([[5], [6]])  # column 99 is used by both rows
    batch.remove_rows([0])  # the long row leaves: columns 3..98 are dead but not at the end
    assert batch.columns == 4 and batch.cache.get_seq_length() == 4
    logits, _ = batch.forward([[7]])
    expected = HFRunner(model).forward([1, 2, 3, 6, 7], all_logits=True)[-1]
    assert torch.allclose(logits[0, 0], expected, atol=1e-4)
