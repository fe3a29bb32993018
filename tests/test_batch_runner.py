"""BatchRunner: rows with their own lengths in one cache give the same logits as one row alone."""

import torch

import tiny
from specdecode.models.backends.hf_batch import BatchRunner
from tiny import reference_logits


def test_ragged_rows_and_rollback_match_single_sequences():
    model = tiny.model()
    batch = BatchRunner(model)
    prefix = [5, 6, 7, 8]
    batch.add_rows(prefix, 3)  # one prefill, three rows
    rows = [[1, 2, 3], [9], [4, 4]]
    logits = batch.forward(rows)
    assert [len(x) for x in logits] == [3, 1, 2]
    # Roll back different amounts per row, then extend again.
    batch.rollback([2, 0, 1])
    kept = [[1], [9], [4]]
    more = [[10, 11], [12, 13, 14], [15]]
    logits2 = batch.forward(more)
    for b in range(3):
        expected = reference_logits(model, prefix + kept[b] + more[b], len(more[b]))
        assert torch.allclose(logits2[b], expected, atol=1e-4), b
    assert batch.pos.tolist() == [len(prefix) + 1 + 2, len(prefix) + 1 + 3, len(prefix) + 1 + 1]
    # last_only: the last fed position of each row, the LM head applied to those alone.
    last = batch.forward([[1], [2, 3], []], last_only=True)
    assert [x.shape[0] for x in last] == [1, 1, 0]
    seqs = [prefix + kept[b] + more[b] for b in range(3)]
    assert torch.allclose(last[0][0], reference_logits(model, seqs[0] + [1], 1)[0], atol=1e-4)
    assert torch.allclose(last[1][0], reference_logits(model, seqs[1] + [2, 3], 1)[0], atol=1e-4)


def test_rollback_crops_columns_no_row_uses():
    batch = BatchRunner(tiny.model())
    batch.add_rows([1, 2], 2)
    batch.forward([[3, 4, 5], [6]])
    batch.rollback([2, 1])
    assert batch.valid.shape[1] == 3  # only the first new column is still in use
    assert batch.cache.get_seq_length() == 3


def test_rows_join_and_leave_without_disturbing_the_others():
    model = tiny.model()
    batch = BatchRunner(model)
    seqs = {"a": [5, 6, 7, 8, 9, 10], "b": [3], "c": [11, 12]}
    batch.add_rows(seqs["a"])
    batch.forward([[1, 2]])
    seqs["a"] += [1, 2]
    batch.add_rows(seqs["b"])  # shorter than the columns in use
    batch.add_rows([])  # no column at all yet: must not produce NaN for anyone
    seqs["empty"] = []
    logits = batch.forward([[4], [7, 7, 7], [2]])
    seqs["a"] += [4]
    seqs["b"] += [7, 7, 7]
    seqs["empty"] += [2]
    assert all(torch.isfinite(x).all() for x in logits)
    batch.rollback([0, 2, 0])
    seqs["b"] = seqs["b"][:-2]
    batch.remove_rows([0])  # "a" leaves
    batch.add_rows(seqs["c"])
    order = ["b", "empty", "c"]
    more = [[1, 2], [3], [4, 5, 6]]
    logits = batch.forward(more)
    for i, name in enumerate(order):
        expected = reference_logits(model, seqs[name] + more[i], len(more[i]))
        assert torch.allclose(logits[i], expected, atol=1e-4), name
    assert batch.pos.tolist() == [len(seqs[n]) + len(m) for n, m in zip(order, more)]
    batch.remove_rows([0, 1, 2])
    assert batch.rows == 0 and batch.columns == 0


def test_dead_columns_are_compacted():
    model = tiny.model()
    batch = BatchRunner(model)
    batch.add_rows(list(range(1, 100)))
    batch.add_rows([1, 2, 3])
    batch.forward([[5], [6]])  # column 99 is used by both rows
    batch.remove_rows([0])  # the long row leaves: columns 3..98 are dead but not at the end
    assert batch.columns == 4 and batch.cache.get_seq_length() == 4
    logits = batch.forward([[7]])
    expected = reference_logits(model, [1, 2, 3, 6, 7], 1)
    assert torch.allclose(logits[0], expected, atol=1e-4)
