"""The proposal-length cost model, by hand, and `specdecode tune` end to end on tiny models."""

import json
import sys

import pytest

from specdecode import cli
from specdecode.advise.tune import Acceptance, Costs, acceptance_from, candidates, load_config, predict, recommend


def run_ok(monkeypatch, capsys, *args) -> str:
    """Run `specdecode ARGS`; it must succeed; its stdout."""
    monkeypatch.setattr(sys, "argv", ["specdecode", *args])
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    return capsys.readouterr().out


def test_prediction_by_hand():
    costs = Costs(verify_s={1: 0.10, 2: 0.12, 3: 0.14, 4: 0.20, 5: 0.30}, draft_token_s=0.02, lookup_s=0.0)
    acc = Acceptance("draft", 4, accepted_at=[0.8, 0.6, 0.4, 0.2], drafted_at=[1, 1, 1, 1], other_per_pass_s=0.01)
    p2 = predict(costs, acc, 2)
    # E = 1 + 0.8 + 0.6 = 2.4 tokens; pass = 2 drafts * 0.02 + verify(3) 0.14 + 0.01 = 0.19 s
    assert p2.expected_tokens_per_pass == pytest.approx(2.4)
    assert p2.pass_s == pytest.approx(0.19)
    assert p2.predicted_tokens_per_s == pytest.approx(2.4 / 0.19)
    p4 = predict(costs, acc, 4)
    assert p4.predicted_tokens_per_s == pytest.approx(3.0 / (0.08 + 0.30 + 0.01))
    preds = [predict(costs, acc, k) for k in (1, 2, 3, 4)]
    assert recommend(preds).k == max(preds, key=lambda p: p.predicted_tokens_per_s).k == 2
    # n-gram: proposals shorter than k on average make the pass narrower.
    ng = Acceptance("ngram", 4, accepted_at=[0.5, 0.25, 0, 0], drafted_at=[0.5, 0.5, 0.25, 0.25],
                    other_per_pass_s=0.0)
    p = predict(costs, ng, 4)
    assert p.costs["verify_s"] == pytest.approx(costs.verify(2.5)) == pytest.approx(0.13)


def test_hybrid_pays_the_draft_model_only_where_the_lookup_found_nothing():
    costs = Costs(verify_s={1: 0.10, 2: 0.12, 3: 0.14}, draft_token_s=0.02, lookup_s=0.001)
    # 40% of the passes drafted from a lookup match (free), 60% from the draft model (k tokens each).
    hybrid = Acceptance("hybrid", 2, accepted_at=[0.7, 0.5], drafted_at=[1.0, 0.9], other_per_pass_s=0.0,
                        model_drafted_at=[0.6, 0.6])
    p = predict(costs, hybrid, 2)
    assert p.costs["draft_s"] == pytest.approx(0.6 * 2 * 0.02 + 0.001)
    assert p.costs["verify_s"] == pytest.approx(costs.verify(2.9))
    # The same acceptance from the draft model alone pays for every drafted token.
    alone = Acceptance("draft", 2, accepted_at=[0.7, 0.5], drafted_at=[1.0, 0.9], other_per_pass_s=0.0)
    assert predict(costs, alone, 2).costs["draft_s"] == pytest.approx(1.9 * 0.02)
    assert predict(costs, hybrid, 2).predicted_tokens_per_s > predict(costs, alone, 2).predicted_tokens_per_s


def test_acceptance_from_reads_the_hybrid_model_share_from_the_sources():
    def run(model_passes, lookup_passes):
        passes = model_passes + lookup_passes
        return {"target_passes": passes, "expected_per_position": [passes * 0.5, passes * 0.25],
                "accepted_per_position": [0, 0],
                "drafted_per_position": [passes, model_passes], "other_s": 0.0, "draft_s": 0.0, "verify_s": 0.0,
                "by_source": {"draft": [model_passes, 2 * model_passes, 0], "ngram1": [lookup_passes, lookup_passes, 0]}}

    hybrid = acceptance_from([run(3, 1), run(1, 3)], "hybrid", 2)
    assert hybrid.model_drafted_at == [0.5, 0.5] and hybrid.model_tokens(2) == pytest.approx(1.0)
    assert hybrid.accepted_at == [0.5, 0.25]
    # The draft alone pays for what it drafted; the lookup alone pays no draft forwards.
    assert acceptance_from([run(3, 1)], "draft", 2).model_tokens(2) == pytest.approx(1.75)
    assert acceptance_from([run(3, 1)], "ngram", 2).model_tokens(2) == 0.0


def test_tune_cli_recommends_and_saves(monkeypatch, capsys, tiny_dirs, tmp_path):
    saved = tmp_path / "tuned.json"
    result = json.loads(run_ok(monkeypatch, capsys, "tune", "--target", tiny_dirs["target"], "--draft",
                               tiny_dirs["draft"], "--dtype", "fp32", "--limit", "2", "--categories", "qa",
                               "--max-new-tokens", "8", "--k", "1,2,4", "--save", str(saved), "--proposer",
                               "draft,ngram,suffix,hybrid", "--draft-context", "16", "--json"))
    for key in ("proposer", "k", "predicted_tokens_per_s", "table"):
        assert key in result
    assert len(result["table"]) == 13 and result["measured_tokens_per_s"] > 0  # plain + 4 proposers x 3 k
    # The raw acceptance runs come with the answer, one per prompt and proposer, enough to redo it.
    runs = result["acceptance_runs"]
    assert sorted(runs) == ["draft", "hybrid", "ngram", "suffix"] and all(len(r) == 2 for r in runs.values())
    assert 0 < result["suffix_lookup_s"] < 0.05
    costs = Costs({int(w): t for w, t in result["verify_cost_s"].items()}, result["draft_token_s"], result["lookup_s"],
                  result["suffix_lookup_s"])
    accs = {name: acceptance_from(r, name, 4) for name, r in runs.items()}
    assert accs["hybrid"].model_drafted_at is not None and 0 <= accs["hybrid"].model_drafted_at[0] <= 1
    redone = candidates(costs, accs, [1, 2, 4])
    assert [(p.proposer, p.k) for p in redone] == [(r["proposer"], r["k"]) for r in result["table"]]
    assert [p.predicted_tokens_per_s for p in redone] == pytest.approx([r["predicted_tokens_per_s"]
                                                                        for r in result["table"]])
    assert result["table"][0]["proposer"] == "none" and result["table"][0]["k"] == 0
    best = max(result["table"], key=lambda r: r["predicted_tokens_per_s"])
    assert (result["proposer"], result["k"]) == (best["proposer"], best["k"])
    # With one category, the per-category pick is the overall pick.
    assert list(result["per_category"]) == ["qa"]
    assert result["per_category"]["qa"]["k"] == result["k"]
    config = load_config(str(saved))
    assert config["k"] == result["k"] and config["proposer"] == result["proposer"]
    # The draft's context window goes with a choice that uses the draft model, and only then.
    assert config.get("draft_context") == (16 if result["proposer"] in ("draft", "hybrid") else None)
    # generate --config uses the saved choice.
    out = run_ok(monkeypatch, capsys, "generate", "hi", "--config", str(saved), "--max-new-tokens", "4",
                 "--json", "--ignore-eos")
    assert len(json.loads(out)["token_ids"]) == 4


def test_bad_config_file(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text('{"k": 4, "speed": "fast"}')
    with pytest.raises(ValueError, match="unknown keys"):
        load_config(str(bad))
    bad.write_text('{"k": 4, "draft_context": "128"}')
    with pytest.raises(ValueError, match="draft_context is a number of prompt tokens"):
        load_config(str(bad))
    with pytest.raises(ValueError, match="config file not found"):
        load_config(str(tmp_path / "none.json"))


def test_verify_curve_is_scaled_to_what_real_passes_cost():
    costs = Costs(verify_s={1: 0.10, 5: 0.20}, draft_token_s=0.0, lookup_s=0.0)
    # The acceptance run drafted 4 tokens per pass (width 5) and its passes cost 0.30 s, not 0.20.
    acc = Acceptance("ngram", 4, accepted_at=[0.5, 0.2, 0.1, 0.0], drafted_at=[1, 1, 1, 1], other_per_pass_s=0.0,
                     verify_per_pass_s=0.30)
    p1 = predict(costs, acc, 1)
    assert p1.costs["verify_s"] == pytest.approx(costs.verify(2) * 1.5)
    assert predict(costs, acc, 4).costs["verify_s"] == pytest.approx(0.30)
    unscaled = Acceptance("ngram", 4, accepted_at=[0.5, 0.2, 0.1, 0.0], drafted_at=[1, 1, 1, 1], other_per_pass_s=0.0)
    assert predict(costs, unscaled, 4).costs["verify_s"] == pytest.approx(0.20)


def test_draft_step_is_scaled_to_what_real_draft_passes_cost():
    costs = Costs(verify_s={1: 0.10, 3: 0.10}, draft_token_s=0.02, lookup_s=0.0)
    # The acceptance run drafted 2 tokens a pass with the model and its draft time was 0.05 s a pass,
    # not 2 x 0.02: every drafted token costs 1.25x the bare step, at any k.
    acc = Acceptance("draft", 2, accepted_at=[0.8, 0.6], drafted_at=[1, 1], other_per_pass_s=0.0,
                     draft_per_pass_s=0.05, passes=10)
    assert predict(costs, acc, 1).costs["draft_s"] == pytest.approx(0.025)
    assert predict(costs, acc, 2).costs["draft_s"] == pytest.approx(0.05)
    # Pooled with a hybrid whose model drafted in half the passes at the bare cost: one scale for both,
    # weighted by passes; the lookup adds nothing to it.
    hybrid = Acceptance("hybrid", 2, accepted_at=[0.5, 0.3], drafted_at=[1, 1], other_per_pass_s=0.0,
                        draft_per_pass_s=0.02, passes=10, model_drafted_at=[0.5, 0.5])
    ngram = Acceptance("ngram", 2, accepted_at=[0.1, 0.0], drafted_at=[0.2, 0.1], other_per_pass_s=0.0,
                       draft_per_pass_s=0.001, passes=50)
    preds = candidates(costs, {"draft": acc, "hybrid": hybrid, "ngram": ngram}, [2])
    scale = (0.05 * 10 + 0.02 * 10) / (2 * 0.02 * 10 + 1 * 0.02 * 10)
    assert preds[1].costs["draft_s"] == pytest.approx(2 * 0.02 * scale)
    assert preds[2].costs["draft_s"] == pytest.approx(1 * 0.02 * scale)
    # Without a measured draft time (no runs), the bare step stands.
    bare = Acceptance("draft", 2, accepted_at=[0.8, 0.6], drafted_at=[1, 1], other_per_pass_s=0.0)
    assert predict(costs, bare, 2).costs["draft_s"] == pytest.approx(0.04)


def test_plain_is_recommended_when_no_proposer_pays():
    from specdecode.advise.tune import predict_plain

    costs = Costs(verify_s={1: 0.10, 2: 0.15, 3: 0.20}, draft_token_s=0.0, lookup_s=0.0)
    rare = Acceptance("ngram", 2, accepted_at=[0.02, 0.0], drafted_at=[1, 1], other_per_pass_s=0.01)
    preds = [predict_plain(costs, rare)] + [predict(costs, rare, k) for k in (1, 2)]
    best = recommend(preds)
    assert (best.proposer, best.k) == ("none", 0)
    assert best.predicted_tokens_per_s == pytest.approx(1 / 0.11)


def test_acceptance_chances_by_hand():
    import torch

    from specdecode import SamplingParams
    from specdecode.proposers import Proposal
    from specdecode.verification.verifier import TokenVerifier

    def verify_drafts(logits, drafts, q, params, generator):
        v = TokenVerifier()(logits, Proposal(drafts, None if q is None else q[0]), params, generator)
        return v.tokens, v.accepted, v.chances

    logits = torch.log(torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.5, 0.1, 0.3, 0.1], [0.25, 0.25, 0.25, 0.25]]))
    q = torch.tensor([[[0.1, 0.3, 0.5, 0.1], [0.1, 0.1, 0.6, 0.2]]])
    _, _, chances = verify_drafts(logits, [1, 2], q, SamplingParams(temperature=1.0), torch.Generator().manual_seed(0))
    assert chances == pytest.approx([1.0, 0.5])  # min(1, 0.6 / 0.3), min(1, 0.3 / 0.6)
    _, accepted, chances = verify_drafts(logits, [1, 0], None, SamplingParams(temperature=0.0), None)
    assert chances == [1.0, 1.0] and accepted == 2  # greedy: one-hot p and q, the argmax is certain
    _, accepted, chances = verify_drafts(logits, [2, 0], None, SamplingParams(temperature=0.0), None)
    assert chances == [0.0, 1.0] and accepted == 0


def test_record_pass_books_the_chance_of_reaching_each_position():
    from specdecode.engine.stats import GenerationStats

    s = GenerationStats()
    s.record_pass(3, 1, 0.0, 0.0, [0.9, 0.5, 0.8])
    s.record_pass(2, 2, 0.0, 0.0)  # no chances given: the realised outcome stands in
    assert s.accepted_per_position == [2, 1, 0]
    assert s.expected_per_position == pytest.approx([1.9, 1.45, 0.36])


def run_totals(gen, runs=300):
    """Per seeded sampled run: drafts accepted (realised) and their expected count (chances)."""
    from specdecode import SamplingParams

    realised, expected = [], []
    for seed in range(runs):
        out = gen.generate("ab", SamplingParams(max_new_tokens=8, temperature=1.0, seed=seed, ignore_eos=True,
                                                sampler="standard"), k=3,
                           chat=False, proposer="draft")
        realised.append(sum(out.stats["accepted_per_position"]))
        expected.append(sum(out.stats["expected_per_position"]))
    return realised, expected


def test_expected_acceptance_has_the_mean_of_the_realised_one_and_less_noise(near_draft_gen):
    import numpy as np
    from scipy import stats

    # 1,200 runs: the variances' gap is a few of their standard errors at this size (about 0.2 on
    # 1.2, each known to about 0.05), where at 300 runs one seed range in four reversed it.
    realised, expected = map(np.asarray, run_totals(near_draft_gen, runs=1200))
    # Same expectation: the paired differences have mean 0 (two-sided t-test at 0.1%).
    assert stats.ttest_1samp(realised - expected, 0.0).pvalue > 1e-3
    assert expected.var() < realised.var()


def test_control_a_biased_chance_is_detected(near_draft_gen, monkeypatch):
    """The same test rejects chances that are too low (c^2 instead of c): it can fail."""
    import numpy as np
    from scipy import stats

    from specdecode.verification.verifier import TokenVerifier, Verdict

    real = TokenVerifier.__call__

    def squared(self, *args, **kwargs):
        v = real(self, *args, **kwargs)
        return Verdict(v.tokens, v.accepted, [c * c for c in v.chances])

    monkeypatch.setattr(TokenVerifier, "__call__", squared)
    realised, expected = map(np.asarray, run_totals(near_draft_gen))
    assert stats.ttest_1samp(realised - expected, 0.0).pvalue < 1e-3


def test_proposers_share_one_verify_scale():
    """Each acceptance run would scale the curve by its own minutes on the machine; the comparison
    between proposers uses one scale pooled over their passes."""
    from specdecode.advise.tune import candidates

    costs = Costs(verify_s={1: 0.10, 2: 0.10, 3: 0.10}, draft_token_s=0.0, lookup_s=0.0)
    fast = Acceptance("draft", 2, accepted_at=[0.5, 0.2], drafted_at=[1, 1], other_per_pass_s=0.0,
                      passes=100, verify_per_pass_s=0.10)
    slow = Acceptance("ngram", 2, accepted_at=[0.5, 0.2], drafted_at=[1, 1], other_per_pass_s=0.0,
                      passes=300, verify_per_pass_s=0.20)
    preds = candidates(costs, {"draft": fast, "ngram": slow}, [2])
    scale = (100 * 0.10 + 300 * 0.20) / (400 * 0.10)
    assert [p.costs["verify_s"] for p in preds] == pytest.approx([0.10 * scale] * 3)
    # Alone, each would have been scaled by its own run.
    assert predict(costs, fast, 2).costs["verify_s"] == pytest.approx(0.10)
    assert predict(costs, slow, 2).costs["verify_s"] == pytest.approx(0.20)


def test_verify_curve_is_fitted_non_decreasing():
    from specdecode.advise.tune import monotone

    fitted = monotone({1: 0.20, 2: 0.22, 3: 0.25, 4: 0.27, 5: 0.21, 6: 0.25, 7: 0.22})
    values = [fitted[w] for w in sorted(fitted)]
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))
    assert fitted[1] == pytest.approx(0.20) and fitted[2] == pytest.approx(0.22)
    assert monotone({1: 0.1, 2: 0.2}) == pytest.approx({1: 0.1, 2: 0.2})  # already monotone: unchanged


def test_generate_takes_the_draft_window_from_a_config(monkeypatch, capsys, tiny_dirs, tmp_path):
    from specdecode import SpeculativeGenerator

    saved = tmp_path / "tuned.json"
    saved.write_text(json.dumps({"proposer": "draft", "k": 2, "target": tiny_dirs["target"],
                                 "draft": tiny_dirs["draft"], "dtype": "fp32", "draft_context": 8}))
    seen = {}
    original = SpeculativeGenerator.from_pretrained.__func__

    def spy(cls, **kwargs):
        seen.update(kwargs)
        return original(cls, **kwargs)

    monkeypatch.setattr(SpeculativeGenerator, "from_pretrained", classmethod(spy))
    out = run_ok(monkeypatch, capsys, "generate", "hi", "--config", str(saved), "--max-new-tokens", "4",
                 "--json", "--ignore-eos")
    assert seen["draft_context"] == 8 and seen["proposer"] == "draft"
    assert len(json.loads(out)["token_ids"]) == 4
