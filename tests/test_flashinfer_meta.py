"""FlashInfer metadata from hand-built block tables: exact indptr / indices / last_page_len /
qo_indptr arrays and cascade levels (core/engine/flashinfer_meta.py), and the CUDA-graph buckets."""

from __future__ import annotations

import pytest

from core.engine.cuda_graphs import bucket_for, graph_batch_sizes
from core.engine.flashinfer_meta import (
    PagedKV, cascade_kv, decode_kv, first_visible_page, pad_decode_kv, prefill_kv, shared_prefix_pages, split_decode,
)

BS = 4


def as_tuple(kv: PagedKV):
    return kv.indptr, kv.indices, kv.last_page_len


def test_decode_rows_sharing_blocks_with_a_partial_last_block_and_one_ending_on_a_boundary():
    # rows 0 and 1 share blocks 3 and 4 (a prompt); row 0 ends 2 tokens into block 5, row 1 fills
    # block 6 exactly (12 = 3 x 4), row 2 has one token in its second block
    kv = decode_kv([[3, 4, 5], [3, 4, 6], [7, 8]], [10, 12, 5], BS)
    assert as_tuple(kv) == ([0, 3, 6, 8], [3, 4, 5, 3, 4, 6, 7, 8], [2, 4, 1])
    assert kv.kv_lens(BS) == [10, 12, 5]


def test_only_the_pages_a_length_needs_are_listed():
    # a table may already hold a block for the next token; a context of 8 reads two full pages
    assert as_tuple(decode_kv([[1, 2, 9]], [8], BS)) == ([0, 2], [1, 2], [4])
    assert as_tuple(decode_kv([[1, 2, 9]], [9], BS)) == ([0, 3], [1, 2, 9], [1])


def test_decode_under_a_sliding_window_drops_pages_before_it():
    # window 8: positions 15..22 (pages 3-5 of row 0) and 6..13 (pages 1, 2, 6 of row 1)
    kv = decode_kv([[0, 1, 2, 3, 4, 5], [0, 1, 2, 6]], [23, 14], BS, window=8)
    assert as_tuple(kv) == ([0, 3, 6], [3, 4, 5, 1, 2, 6], [3, 2])
    # the kept keys still end at the query: 11 and 10 keys, of which the window sees the last 8
    assert kv.kv_lens(BS) == [11, 10]
    assert first_visible_page(22, 8, BS) == 3 and first_visible_page(5, 8, BS) == 0 and first_visible_page(5, None, BS) == 0


def test_prefill_without_cached_context():
    meta = prefill_kv([6], [0], [[7, 8]], BS)
    assert meta.qo_indptr == [0, 6]
    assert as_tuple(meta.kv) == ([0, 2], [7, 8], [2])


def test_prefill_with_cached_context():
    # 5 cached tokens, 3 new: the chunk's keys are positions 0..7, two full pages
    meta = prefill_kv([3], [5], [[1, 2]], BS)
    assert meta.qo_indptr == [0, 3]
    assert as_tuple(meta.kv) == ([0, 2], [1, 2], [4])


def test_chunked_prefill_of_one_prompt_step_by_step_and_chunks_of_three_sequences_in_one_step():
    table = [5, 6, 7]  # a 10-token prompt in chunks of 4, 4, 2
    steps = [prefill_kv([4], [0], [table[:1]], BS), prefill_kv([4], [4], [table[:2]], BS),
             prefill_kv([2], [8], [table], BS)]
    assert [m.qo_indptr for m in steps] == [[0, 4], [0, 4], [0, 2]]
    assert [as_tuple(m.kv) for m in steps] == [([0, 1], [5], [4]), ([0, 2], [5, 6], [4]), ([0, 3], [5, 6, 7], [2])]
    batch = prefill_kv([4, 3, 2], [0, 5, 8], [[5], [1, 2], [5, 6, 7]], BS)
    assert batch.qo_indptr == [0, 4, 7, 9]
    assert as_tuple(batch.kv) == ([0, 1, 3, 6], [5, 1, 2, 5, 6, 7], [4, 4, 2])


def test_prefill_under_a_sliding_window():
    # queries at 9..12, window 3: the earliest sees 7..9, so page 0 (positions 0..3) is left out
    meta = prefill_kv([4], [9], [[0, 1, 2, 3]], BS, window=3)
    assert meta.qo_indptr == [0, 4]
    assert as_tuple(meta.kv) == ([0, 3], [1, 2, 3], [1])


def test_cascade_levels_for_two_problems_sharing_only_a_system_prompt():
    # block 1 holds a system prompt both problems start with; A's prompt continues in 10, 11 and
    # B's in 30, 31; each has two candidates with a page of their own
    tables = [[1, 10, 11, 20], [1, 30, 31, 40], [1, 10, 11, 21], [1, 30, 31, 41], [50, 51]]
    lengths = [14, 13, 15, 16, 6]
    split = split_decode(tables, lengths, BS)
    # the cost rule keeps the problems apart (one shared page saves less than the wider scans
    # cost), so each problem is its own group; the unrelated row decodes plainly
    assert split.plain == [4]
    assert as_tuple(split.plain_kv) == ([0, 2], [50, 51], [2])
    c = split.cascade
    assert c.groups == [[0, 2], [1, 3]]
    assert c.rows == [0, 2, 1, 3]  # query order: group by group
    assert c.qo_indptr == [[0, 2, 4], [0, 1, 2, 3, 4]]
    # level 0: each problem's shared pages (system prompt included: it is part of each prefix), full
    assert as_tuple(c.kv[0]) == ([0, 3, 6], [1, 10, 11, 1, 30, 31], [4, 4])
    # level 1: each row's own page after them
    assert as_tuple(c.kv[1]) == ([0, 1, 2, 3, 4], [20, 21, 40, 41], [2, 3, 1, 4])
    # every row's keys are its shared part plus its own
    assert [12 + n for n in c.kv[1].kv_lens(BS)] == [lengths[r] for r in c.rows]


def test_shared_prefix_leaves_every_row_a_page_of_its_own():
    assert shared_prefix_pages([[1, 2, 3], [1, 2, 4]], [9, 12], BS) == 2
    # row 0 needs only pages 1, 2: sharing both would leave it nothing at level 1
    assert shared_prefix_pages([[1, 2], [1, 2, 3]], [5, 9], BS) == 1
    assert shared_prefix_pages([[1, 2], [3, 4]], [5, 5], BS) == 0
    with pytest.raises(ValueError, match="sharing no full page"):
        cascade_kv([[1, 2], [3, 4]], [5, 5], BS, [[0, 1]])


def test_windowed_layers_and_disabled_cascade_decode_plainly():
    tables = [[1, 10, 11, 20], [1, 10, 11, 21]]
    assert split_decode(tables, [14, 15], BS).cascade is not None
    for split in (split_decode(tables, [14, 15], BS, window=6), split_decode(tables, [14, 15], BS, use_cascade=False)):
        assert split.cascade is None and split.plain == [0, 1]
    assert as_tuple(split_decode(tables, [14, 15], BS, window=6).plain_kv) == ([0, 2, 4], [11, 20, 11, 21], [2, 3])


def test_graph_padding_rows_read_one_token_of_the_scratch_page():
    kv = decode_kv([[3, 4, 5], [3, 4, 6], [7, 8]], [10, 12, 5], BS)
    padded = pad_decode_kv(kv, 5, scratch_page=99)
    assert as_tuple(padded) == ([0, 3, 6, 8, 9, 10], [3, 4, 5, 3, 4, 6, 7, 8, 99, 99], [2, 4, 1, 1, 1])
    assert as_tuple(pad_decode_kv(kv, 3, 99)) == as_tuple(kv)
    with pytest.raises(ValueError, match="do not fit a graph of batch size 2"):
        pad_decode_kv(kv, 2, 99)


def test_graph_batch_size_buckets():
    assert graph_batch_sizes(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert graph_batch_sizes(48) == [1, 2, 4, 8, 16, 32, 48]
    assert graph_batch_sizes(1) == [1]
    sizes = graph_batch_sizes(48)
    assert [bucket_for(n, sizes) for n in (1, 3, 8, 33, 48, 49)] == [1, 4, 8, 48, 48, None]


def test_tables_too_short_and_bad_windows_are_refused():
    with pytest.raises(ValueError, match="1 pages of 4 tokens cannot hold a KV length of 5"):
        decode_kv([[1]], [5], BS)
    with pytest.raises(ValueError, match="window must be >= 1"):
        decode_kv([[1]], [3], BS, window=0)
    with pytest.raises(ValueError, match=">= 1 query row"):
        prefill_kv([0], [0], [[1]], BS)
