"""GenerationEngine against plain `transformers` on the same weights.

Tiny random-weight Llama/Qwen2 models (see conftest) run in milliseconds per step; block size 4
makes every prompt span several KV blocks, so block tables, prefix caching, copy-on-write and
preemption are all exercised by short prompts.
"""

from __future__ import annotations

import pytest
import torch

from conftest import (
    free_all, greedy, hf_greedy, hf_logits, make_engine, random_prompts, run_to_end,
)
from core.engine.engine import EngineConfig, GenerationEngine
from core.engine.sequence import SamplingParams, Sequence, SeqStatus, StopCriteria, StopReason
from core.engine.stopping import TokenPieces, check_stop

BS = 4


def record_steps(engine: GenerationEngine) -> list:
    """Make ``engine.step`` append every StepOutput to the returned list."""
    outs = []
    orig = engine.step

    def step():
        out = orig()
        outs.append(out)
        return out

    engine.step = step
    return outs


def record_forwards(engine: GenerationEngine):
    """Wrap the runner's forward; returns ``(rows, batches)``.

    rows: ``(seq, position, logits_row)`` for every logits row computed;
    batches: per forward, ``[(seq, num_computed_before, num_tokens)]``.
    """
    rows, batches = [], []
    orig = engine.runner.forward

    def forward(batch, logit_rows):
        spans, off = [], 0
        for seq, n in batch:
            spans.append((seq, seq.num_computed, off, n))
            off += n
        batches.append([(s, c, n) for s, c, _, n in spans])
        logits = orig(batch, logit_rows)
        for i, r in enumerate(logit_rows):
            seq, c, o, _ = next(sp for sp in spans if sp[2] <= r < sp[2] + sp[3])
            rows.append((seq, c + r - o, logits[i].detach().clone()))
        return logits

    engine.runner.forward = forward
    return rows, batches


def new_tokens(seq: Sequence) -> list[int]:
    return seq.token_ids[seq.num_prompt_tokens:]


# ---------------------------------------------------------------------------- greedy vs generate
PROMPT_LENGTHS = [1, 5, 17, 33, 48]


def test_greedy_matches_hf_generate(tiny_model):
    prompts = random_prompts(PROMPT_LENGTHS, seed=10)
    k = 16
    engine = make_engine(tiny_model, max_num_batched_tokens=24)
    steps = record_steps(engine)
    seqs = engine.generate(prompts, *greedy(k))
    # chunked prefill shared steps with decode rows, and the budget was respected
    assert any(o.num_prefill_tokens and o.num_decode_tokens for o in steps)
    assert max(o.num_tokens for o in steps) <= 24
    for p, s in zip(prompts, seqs):
        assert s.token_ids[:len(p)] == p
        assert new_tokens(s) == hf_greedy(tiny_model, p, k), f"prompt of {len(p)} tokens"
        assert s.stop_reason is StopReason.MAX_TOKENS and s.status is SeqStatus.PAUSED
    assert engine.pool.num_used > 0  # paused sequences keep their KV
    free_all(engine, seqs)
    assert engine.pool.num_used == 0


@pytest.mark.slow
def test_smollm2_chat_greedy_matches_hf(smollm2):
    model, tok = smollm2.model, smollm2.tokenizer
    chats = [
        [{"role": "user", "content": "What is 12 * 7? Answer in one sentence."}],
        [{"role": "system", "content": "You are a careful math tutor."},
         {"role": "user", "content": "Natalia sold clips to 48 of her friends in April, and then she sold half as "
                                     "many clips in May. How many clips did she sell altogether?"}],
    ]
    prompts = [list(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True)["input_ids"])
               for c in chats]
    k = 24
    engine = GenerationEngine(model, EngineConfig(block_size=16, num_blocks=64, max_num_batched_tokens=32,
                                                  max_model_len=512))
    steps = record_steps(engine)
    seqs = engine.generate(prompts, *greedy(k))
    assert any(o.num_prefill_tokens and o.num_decode_tokens for o in steps)
    for p, s in zip(prompts, seqs):
        assert new_tokens(s) == hf_greedy(model, p, k), tok.decode(new_tokens(s))
    free_all(engine, seqs)
    assert engine.pool.num_used == 0


# ---------------------------------------------------------------------------- packed-batch logits
def test_packed_batch_logits_match_plain_forward(tiny_model):
    engine = make_engine(tiny_model, max_num_batched_tokens=10)
    rows, batches = record_forwards(engine)
    gen_prompts = random_prompts([6, 9], seed=11)
    gens = [engine.add(p, sampling=SamplingParams(temperature=0), stop=StopCriteria(step_delimiter=None, max_tokens=12))
            for p in gen_prompts]
    engine.step()
    engine.step()
    p1, p2 = random_prompts([23, 14], seed=12)
    pre = [engine.add(p1, prefill_only=True, read_positions=list(range(23))),
           engine.add(p2, prefill_only=True, read_positions=list(range(14)))]
    prefilled = []
    while pre[0].status is not SeqStatus.FINISHED:
        prefilled += engine.step().prefilled
    # shares 4 full blocks with p1 (now prefix-cached); reads only past the shared part
    p3 = p1[:16] + random_prompts([7], seed=13)[0]
    pre.append(engine.add(p3, prefill_only=True, read_positions=[16, 19, 22]))
    hits = engine.pool.hits
    outs = run_to_end(engine)
    prefilled += [s for o in outs for s in o.prefilled]
    assert engine.pool.hits - hits == 4 and pre[2].num_cached_prompt == 16

    # the schedule really mixed things: a continued prefill chunk next to decode rows in one forward
    assert any(any(n > 1 and c > 0 for _, c, n in b) and any(n == 1 and c > 0 for _, c, n in b) for b in batches)
    assert set(prefilled) == {s.seq_id for s in pre}
    for s in pre:
        assert s.stop_reason is StopReason.PREFILLED and s.status is SeqStatus.FINISHED
        assert len(s.read_logits) == len(s.read_positions)
        ref = hf_logits(tiny_model, s.token_ids)
        got = torch.stack(s.read_logits)
        torch.testing.assert_close(got, ref[s.read_positions], atol=1e-4, rtol=0)
    # every sampled row of the generating sequences too
    gen_rows = [(s, pos, row) for s, pos, row in rows if not s.prefill_only]
    assert len(gen_rows) == sum(s.num_generated for s in gens) == 24
    for s in gens:
        ref = hf_logits(tiny_model, s.token_ids)
        for s2, pos, row in gen_rows:
            if s2 is s:
                torch.testing.assert_close(row, ref[pos], atol=1e-4, rtol=0)
    free_all(engine, gens)
    assert engine.pool.num_used == 0


def test_prefill_only_read_positions_inside_cached_prefix(tiny_llama):
    """A read position inside a prefix-cached block still returns its logits row."""
    engine = make_engine(tiny_llama)
    (p,) = random_prompts([22], seed=14)
    ref = hf_logits(tiny_llama, p)
    a = engine.add(p, prefill_only=True, read_positions=[21])
    run_to_end(engine)
    b = engine.add(p, prefill_only=True, read_positions=[3, 10, 21])
    run_to_end(engine)
    c = engine.add(p, prefill_only=True, read_positions=[10, 21])
    run_to_end(engine)
    assert len(a.read_logits) == 1 and len(b.read_logits) == 3 and len(c.read_logits) == 2
    torch.testing.assert_close(torch.stack(b.read_logits), ref[[3, 10, 21]], atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.stack(c.read_logits), ref[[10, 21]], atol=1e-4, rtol=0)
    # the blocks before the first read position still come from the cache
    assert c.num_cached_prompt == 8
    assert engine.pool.num_used == 0


# ---------------------------------------------------------------------------- prefix cache
def _run_one(engine, prompt, k):
    (s,) = engine.generate([prompt], *greedy(k))
    toks = new_tokens(s)
    engine.free(s)
    return toks, s


def test_prefix_cache_reuse_matches_uncached_and_hf(tiny_model):
    (a,) = random_prompts([30], seed=20)
    b = a[:24] + random_prompts([10], seed=21)[0]
    k = 10
    cached = make_engine(tiny_model)
    plain = make_engine(tiny_model, enable_prefix_caching=False)
    outs, hits, admitted = [], [cached.pool.hits], []
    for p in (a, b, a):
        toks, s = _run_one(cached, p, k)
        outs.append(toks)
        hits.append(cached.pool.hits)
        admitted.append(s.num_cached_prompt)
    # b shares 6 full blocks with a; a again finds its 7 full prompt blocks ((30 - 1) // 4)
    assert [hits[i + 1] - hits[i] for i in range(3)] == [0, 6, 7]
    assert admitted == [0, 24, 28]
    assert cached.pool.num_used == 0
    plain_outs = [_run_one(plain, p, k)[0] for p in (a, b, a)]
    assert plain.pool.hits == 0
    ref = [hf_greedy(tiny_model, p, k) for p in (a, b, a)]
    assert outs == plain_outs == ref


def test_prompt_served_wholly_from_prefix_cache(tiny_model):
    """Same block-aligned prompt again: all its blocks are cached, yet the last one is recomputed for logits."""
    (p,) = random_prompts([16], seed=22)
    k = 8
    ref = hf_greedy(tiny_model, p, k)
    engine = make_engine(tiny_model)
    first, _ = _run_one(engine, p, k)
    h = engine.pool.hits
    second, s = _run_one(engine, p, k)
    assert engine.pool.hits - h == 3 and s.num_cached_prompt == 12
    assert first == second == ref

    # while the first copy is still running (its blocks in use, ref count 2)
    sp, st = greedy(k)
    s1 = engine.add(p, sampling=sp, stop=st)
    engine.step()
    assert s1.num_computed == 16
    s2 = engine.add(p, sampling=sp, stop=st)
    engine.step()
    assert s2.block_table[:3] == s1.block_table[:3]
    assert [engine.pool.ref_count[x] for x in s1.block_table[:3]] == [2, 2, 2]
    run_to_end(engine)
    assert new_tokens(s1) == new_tokens(s2) == ref
    free_all(engine, [s1, s2])
    assert engine.pool.num_used == 0


# ---------------------------------------------------------------------------- fork / copy-on-write
@pytest.mark.parametrize("generated_at_fork", [3, 4])  # 10-token prompt: 3 -> block-aligned KV, 4 -> partial block
def test_fork_greedy_continues_like_unforked(tiny_model, generated_at_fork):
    (p,) = random_prompts([10], seed=30)
    k = 14
    ref = hf_greedy(tiny_model, p, k)
    engine = make_engine(tiny_model)
    s = engine.add(p, sampling=SamplingParams(temperature=0), stop=StopCriteria(step_delimiter=None, max_tokens=k))
    while s.num_generated < generated_at_fork:
        engine.step()
    partial = s.num_computed % BS
    assert bool(partial) == (generated_at_fork == 4)
    n_full = s.num_computed // BS
    used = engine.pool.num_used
    c = engine.fork(s)
    assert c.token_ids == s.token_ids and c.num_computed == s.num_computed
    assert c.block_table[:n_full] == s.block_table[:n_full]
    assert all(engine.pool.ref_count[x] == 2 for x in s.block_table[:n_full])
    if partial:
        assert c.block_table[-1] != s.block_table[-1] and engine.pool.ref_count[c.block_table[-1]] == 1
        assert engine.pool.num_used == used + 1
    else:
        assert len(c.block_table) == n_full and engine.pool.num_used == used
    run_to_end(engine)
    assert new_tokens(s) == new_tokens(c) == ref
    engine.free(s)
    assert engine.pool.num_used > 0
    engine.free(c)
    assert engine.pool.num_used == 0


@pytest.mark.parametrize("generated_at_fork", [3, 4])
def test_fork_sampling_does_not_corrupt_parent(tiny_model, generated_at_fork):
    (p,) = random_prompts([10], seed=31)
    k = 16
    sp, st = SamplingParams(temperature=1.0), StopCriteria(step_delimiter=None, max_tokens=k)
    (unforked,) = make_engine(tiny_model).generate([p], sp, st, seeds=[7])

    engine = make_engine(tiny_model)
    s = engine.add(p, sampling=sp, stop=st, seeds=[7], candidates=["parent"])
    while s.num_generated < generated_at_fork:
        engine.step()
    at_fork = list(s.token_ids)
    c = engine.fork(s, seeds=[99], candidates=["child"])
    assert c.seeds == [99] and c.candidates == ["child"] and s.seeds == [7]
    run_to_end(engine)
    assert s.token_ids == unforked.token_ids
    assert c.token_ids[:len(at_fork)] == at_fork and c.token_ids != s.token_ids
    assert c.num_generated == k and c.stop_reason is StopReason.MAX_TOKENS
    # the child continues exactly like a fresh sequence started from the fork point with its seed
    (fresh,) = make_engine(tiny_model).generate(
        [at_fork], sp, StopCriteria(step_delimiter=None, max_tokens=k - generated_at_fork), seeds=[99])
    assert fresh.token_ids == c.token_ids
    free_all(engine, [s, c])
    assert engine.pool.num_used == 0


# ---------------------------------------------------------------------------- preemption
def test_preemption_small_pool_matches_big_pool(tiny_model):
    prompts = random_prompts([5, 9, 12, 17, 20, 26, 30, 33], seed=40)
    k = 30
    big = make_engine(tiny_model, max_model_len=64, num_blocks=256, max_num_batched_tokens=32)
    ref = big.generate(prompts, *greedy(k))
    assert big.scheduler.num_preemptions == 0

    with pytest.raises(ValueError):
        make_engine(tiny_model, max_model_len=64, num_blocks=16)  # 64 / 4 + 1 = 17 is the minimum
    small = make_engine(tiny_model, max_model_len=64, num_blocks=20, max_num_batched_tokens=32)
    seqs = small.generate(prompts, *greedy(k))
    assert small.scheduler.num_preemptions > 0
    for r, s in zip(ref, seqs):
        assert s.token_ids == r.token_ids and s.stop_reason is r.stop_reason is StopReason.MAX_TOKENS
    # a preempted sequence came back through the prefix cache
    assert small.pool.hits > 0
    assert any(s.num_preemptions and s.num_cached_prompt for s in seqs)
    assert [new_tokens(r) for r in ref[:3]] == [hf_greedy(tiny_model, p, k) for p in prompts[:3]]
    free_all(small, seqs)
    assert small.pool.num_used == 0
    # nothing leaked: every block is allocatable again
    assert len(small.pool.allocate(20)) == 20


# ---------------------------------------------------------------------------- context limit
def test_prompt_of_exactly_max_model_len(tiny_model):
    engine = make_engine(tiny_model, max_model_len=32, num_blocks=9)  # the smallest pool allowed
    (p,) = random_prompts([32], seed=50)
    expected = int(hf_logits(tiny_model, p)[-1].argmax())
    for _ in range(2):  # the second time every full block comes from the prefix cache
        (s,) = engine.generate([p], *greedy(10))
        assert s.num_generated == 1 and s.stop_reason is StopReason.CONTEXT
        assert s.token_ids[-1] == expected
        engine.free(s)
    assert engine.pool.hits == 7
    with pytest.raises(ValueError):
        engine.add(p + [1])
    with pytest.raises(ValueError):
        engine.add([])
    with pytest.raises(ValueError):
        engine.add([128])
    with pytest.raises(ValueError):
        engine.add([1, 2], read_positions=[2])
    with pytest.raises(ValueError):
        engine.add([1, 2], seeds=[1, 2], candidates=["a"])
    with pytest.raises(ValueError):
        make_engine(tiny_model, max_model_len=32, num_blocks=8)
    # a generating sequence stops when it reaches the context limit
    (q,) = random_prompts([25], seed=51)
    (s,) = engine.generate([q], *greedy(100))
    assert len(s.token_ids) == 32 and s.stop_reason is StopReason.CONTEXT
    assert new_tokens(s) == hf_greedy(tiny_model, q, 7)


# ---------------------------------------------------------------------------- stop conditions
@pytest.fixture
def pieces():
    tp = TokenPieces(None, 16)
    tp[5] = "\n"
    tp[6] = "\n\n"
    tp[7] = "a\n"
    tp[8] = "b"
    tp[9] = "</s>"
    return tp


def feed(seq: Sequence, tokens, pieces, max_model_len=1000):
    reasons = []
    for t in tokens:
        seq.token_ids.append(t)
        reasons.append(check_stop(seq, t, pieces, max_model_len))
    return reasons


def make_seq(**stop) -> Sequence:
    return Sequence(token_ids=[1, 2, 3], sampling=SamplingParams(), stop=StopCriteria(**stop))


D = StopReason.DELIMITER


@pytest.mark.parametrize("tokens,expected", [
    ([8, 5, 5], [None, None, D]),  # delimiter across two tokens
    ([5, 5], [None, None]),  # leading blank lines belong to the step: no empty steps
    ([6, 8, 6], [None, None, D]),
    ([7, 5], [None, D]),
    ([8, 6], [None, D]),  # inside one token
    ([8, 5, 8, 5, 8], [None] * 5),  # single newlines only
    ([5, 8, 5], [None, None, None]),
    ([8, 8, 7, 6], [None, None, None, D]),
])
def test_check_stop_delimiter(pieces, tokens, expected):
    assert feed(make_seq(), tokens, pieces) == expected


def test_check_stop_multichar_delimiter_and_disabled(pieces):
    assert feed(make_seq(step_delimiter="\n\n\n"), [5, 5, 8, 6, 5], pieces) == [None, None, None, None, D]
    assert feed(make_seq(step_delimiter="\n\n\n"), [8, 5, 6], pieces) == [None, None, D]
    assert feed(make_seq(step_delimiter="\n\n\n"), [5, 6], pieces) == [None, None]  # no empty step
    assert feed(make_seq(step_delimiter=None), [6, 5, 5], pieces) == [None, None, None]
    assert feed(make_seq(step_delimiter="b"), [5, 8], pieces) == [None, D]


def test_check_stop_eos(pieces):
    assert feed(make_seq(eos_token_ids=frozenset({9})), [8, 9], pieces) == [None, StopReason.EOS]
    # EOS wins over the step limit; the delimiter text of other tokens is irrelevant
    assert feed(make_seq(eos_token_ids=frozenset({9, 6}), max_step_tokens=1), [6], pieces) == [StopReason.EOS]
    # ignore_eos: keeps going, still stops on limits
    seq = make_seq(eos_token_ids=frozenset({9}), ignore_eos=True, max_tokens=3)
    assert feed(seq, [9, 9, 9], pieces) == [None, None, StopReason.MAX_TOKENS]


def test_check_stop_limits(pieces):
    seq = make_seq(max_step_tokens=3, max_tokens=5)
    assert feed(seq, [8, 8, 8], pieces) == [None, None, StopReason.STEP_TOKENS]
    seq.step_start = len(seq.token_ids)  # next step (as resume does)
    assert feed(seq, [8, 8], pieces) == [None, StopReason.MAX_TOKENS]  # 5 generated in total
    # a delimiter on the step's last allowed token still counts as a complete step
    assert feed(make_seq(max_step_tokens=2), [8, 6], pieces) == [None, D]
    # the context limit (whole sequence length)
    assert feed(make_seq(), [8, 8], pieces, max_model_len=5) == [None, StopReason.CONTEXT]
    # a delimiter on the path's last allowed token ends the path: resuming it would overrun the limit
    assert feed(make_seq(max_tokens=2), [8, 6], pieces) == [None, StopReason.MAX_TOKENS]
    assert feed(make_seq(), [5, 5], pieces, max_model_len=5) == [None, StopReason.CONTEXT]
    assert not StopReason.DELIMITER.ends_path and StopReason.STEP_TOKENS.ends_path


# ---------------------------------------------------------------------------- seeded sampling
def test_seeded_sampling_independent_of_batch(tiny_model):
    p, *others = random_prompts([11, 7, 19, 26], seed=60)
    sp = SamplingParams(temperature=0.8, top_p=0.95)
    st = StopCriteria(step_delimiter=None, max_tokens=16)
    engine = make_engine(tiny_model)
    (alone,) = engine.generate([p], sp, st, seeds=[42])
    (again,) = engine.generate([p], sp, st, seeds=[42])
    (other_seed,) = engine.generate([p], sp, st, seeds=[43])
    assert alone.token_ids == again.token_ids
    assert new_tokens(alone) != new_tokens(other_seed)
    mixed = make_engine(tiny_model, max_num_batched_tokens=16)
    batch = mixed.generate([others[0], p, others[1], others[2]], sp, st, seeds=[1, 42, 2, 3])
    assert batch[1].token_ids == alone.token_ids
    assert len({tuple(new_tokens(s)) for s in batch}) == 4


# ---------------------------------------------------------------------------- several candidates per sequence
SEEDS = [1, 2, 3, 4]
TAGS = ["a", "b", "c", "d"]


def _per_seed_reference(model, p, sp, st):
    engine = make_engine(model)
    return {seed: engine.add(p, sampling=sp, stop=st, seeds=[seed]) for seed in SEEDS}, engine


def test_multi_seed_sequence_forks_per_candidate(tiny_model):
    (p,) = random_prompts([9], seed=70)
    sp, st = SamplingParams(temperature=1.0), StopCriteria(step_delimiter=None, max_tokens=8)
    ref, ref_engine = _per_seed_reference(tiny_model, p, sp, st)
    run_to_end(ref_engine)

    engine = make_engine(tiny_model)
    s = engine.add(p, sampling=sp, stop=st, seeds=SEEDS, candidates=TAGS)
    out = engine.step()
    assert len(out.forked) == 3 and all(ev.parent == s.seq_id for ev in out.forked)
    members = [s] + [engine.sequence(ev.child) for ev in out.forked]
    assert [ev.candidates for ev in out.forked] == [(t,) for t in TAGS[1:]]
    assert [m.seeds for m in members] == [[x] for x in SEEDS] and [m.candidates for m in members] == [[t] for t in TAGS]
    for m, seed in zip(members, SEEDS):
        assert m.num_generated == 1 and m.token_ids[-1] == ref[seed].token_ids[len(p)]
    assert engine.pool.ref_count[s.block_table[0]] == 4  # the prompt's full blocks are shared
    run_to_end(engine)
    for m, seed in zip(members, SEEDS):
        assert m.token_ids == ref[seed].token_ids
    free_all(engine, members)
    assert engine.pool.num_used == 0


def test_multi_seed_dedup_keeps_candidates_together_until_they_diverge(tiny_model):
    (p,) = random_prompts([9], seed=71)
    sp, st = SamplingParams(temperature=0.3), StopCriteria(step_delimiter=None, max_tokens=12)
    ref, ref_engine = _per_seed_reference(tiny_model, p, sp, st)
    run_to_end(ref_engine)

    engine = make_engine(tiny_model)
    s = engine.add(p, sampling=sp, stop=st, seeds=SEEDS, candidates=TAGS, dedup=True)
    outs = run_to_end(engine)
    members = [s] + [engine.sequence(ev.child) for o in outs for ev in o.forked]
    # every candidate ended in exactly one sequence, with the same tokens as when run alone
    owner = {t: m for m in members for t in m.candidates}
    assert sorted(owner) == TAGS
    for seed, tag in zip(SEEDS, TAGS):
        assert owner[tag].token_ids == ref[seed].token_ids
    distinct = {tuple(r.token_ids) for r in ref.values()}
    assert len(members) == len(distinct)
    free_all(engine, members)
    assert engine.pool.num_used == 0


def test_multi_seed_dedup_greedy_never_forks(tiny_model):
    (p,) = random_prompts([9], seed=72)
    k = 8
    engine = make_engine(tiny_model)
    s = engine.add(p, sampling=SamplingParams(temperature=0), stop=StopCriteria(step_delimiter=None, max_tokens=k),
                   seeds=SEEDS, candidates=TAGS, dedup=True)
    outs = run_to_end(engine)
    assert not any(o.forked for o in outs)
    assert s.candidates == TAGS and s.seeds == SEEDS
    assert sum(o.num_sampled for o in outs) == 4 * k
    assert new_tokens(s) == hf_greedy(tiny_model, p, k)
    engine.free(s)
    assert engine.pool.num_used == 0


# ---------------------------------------------------------------------------- priorities under KV pressure
def run_freeing_stopped(engine: GenerationEngine) -> list[Sequence]:
    """Step to the end, freeing each sequence as soon as it stops (as the search does); returns them in order."""
    stopped = []
    while engine.has_work():
        out = engine.step()
        for ev in out.stopped:
            s = engine.sequence(ev.seq)
            assert ev.candidates == tuple(s.candidates) and ev.num_tokens == len(s.token_ids)
            engine.free(s)
            stopped.append(s)
        assert engine.total_steps < 10_000
    return stopped


def test_preemption_respects_priority(tiny_model):
    """A low-priority sequence that runs out of KV preempts itself, never a higher-priority one."""
    hi_p, lo_p = random_prompts([6, 6], seed=80)
    k = 26
    engine = make_engine(tiny_model, max_model_len=32, num_blocks=10, max_num_batched_tokens=16)
    lo = engine.add(lo_p, sampling=SamplingParams(temperature=0), stop=StopCriteria(step_delimiter=None, max_tokens=k),
                    priority=1)
    hi = engine.add(hi_p, sampling=SamplingParams(temperature=0), stop=StopCriteria(step_delimiter=None, max_tokens=k),
                    priority=0)
    stopped = run_freeing_stopped(engine)
    assert stopped == [hi, lo]
    assert engine.scheduler.num_preemptions > 0
    assert hi.num_preemptions == 0 and lo.num_preemptions > 0
    assert new_tokens(hi) == hf_greedy(tiny_model, hi_p, k)
    assert new_tokens(lo) == hf_greedy(tiny_model, lo_p, k)
    assert engine.pool.num_used == 0


def test_preempted_prefill_only_sequence_reads_each_position_once(tiny_model):
    """A prefill-only sequence preempted mid-prefill is recomputed; its logits rows are not duplicated."""
    (g_p, p) = random_prompts([4, 30], seed=81)
    engine = make_engine(tiny_model, max_model_len=32, num_blocks=9, max_num_batched_tokens=8)
    g = engine.add(g_p, sampling=SamplingParams(temperature=0), stop=StopCriteria(step_delimiter=None, max_tokens=28))
    pre = engine.add(p, prefill_only=True, read_positions=list(range(30)), priority=1)
    run_freeing_stopped(engine)
    assert pre.num_preemptions > 0 and g.num_preemptions == 0
    assert pre.stop_reason is StopReason.PREFILLED
    assert len(pre.read_logits) == 30
    torch.testing.assert_close(torch.stack(pre.read_logits), hf_logits(tiny_model, p), atol=1e-4, rtol=0)
    assert new_tokens(g) == hf_greedy(tiny_model, g_p, 28)
    assert engine.pool.num_used == 0


# ---------------------------------------------------------------------------- steps: pause at a delimiter, resume
def test_resume_after_delimiter_continues_like_one_pass(tiny_model):
    """Greedy generation cut into steps (paused at each delimiter, resumed a few engine steps later, some
    paused sequences preempted meanwhile) gives the same tokens as one uninterrupted pass."""
    prompts = random_prompts([7, 12, 18, 23], seed=90)
    k = 30
    refs = [hf_greedy(tiny_model, p, k) for p in prompts]
    engine = make_engine(tiny_model, max_model_len=64, num_blocks=20, max_num_batched_tokens=16)
    engine.pieces.pieces = [b"x"] * len(engine.pieces.pieces)  # text, so a delimiter can end a step
    for t in range(0, 128, 6):
        engine.pieces[t] = "\n\n"  # a delimiter token every 6 ids
    engine.pieces[1] = "\n"
    sp, st = SamplingParams(temperature=0), StopCriteria(step_delimiter="\n\n", max_tokens=k)
    seqs = [engine.add(p, sampling=sp, stop=st, seeds=[i], candidates=[f"t{i}"]) for i, p in enumerate(prompts)]
    parked: list[tuple[int, Sequence]] = []  # (engine step at which to resume, sequence)
    n_steps, n_delims, resumed_without_kv = 0, 0, 0
    while engine.has_work() or parked:
        out = engine.step()
        n_steps += 1
        for s in [engine.sequence(ev.seq) for ev in out.stopped]:
            assert s.status is SeqStatus.PAUSED
            if s.stop_reason is StopReason.DELIMITER:
                assert engine.pieces[s.token_ids[-1]] == b"\n\n" or s.token_ids[-2:] == [1, 1]
                n_delims += 1
                parked.append((n_steps + 3, s))
        for due, s in [x for x in parked if x[0] <= n_steps]:
            parked.remove((due, s))
            resumed_without_kv += not s.block_table
            engine.resume(s, s.seeds, s.candidates)
            assert s.stop_reason is None and s.step_start == len(s.token_ids)
        assert n_steps < 5000
    assert n_delims >= 4 and resumed_without_kv > 0
    for p, s, ref in zip(prompts, seqs, refs):
        assert s.stop_reason is StopReason.MAX_TOKENS and new_tokens(s) == ref
    with pytest.raises(ValueError):
        engine.resume(seqs[0], [0], ["x"])  # its path ended
    free_all(engine, seqs)
    assert engine.pool.num_used == 0
