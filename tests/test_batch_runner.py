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
