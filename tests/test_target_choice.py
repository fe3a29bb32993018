"""--target auto: the default target on the runtime measured fastest for speculative decoding here."""

import dataclasses

import pytest

import tiny
from specdecode.models import target_choice
from specdecode.models.loader import as_runner
from specdecode.models.registry import ModelError


def curve(*ms):
    return {str(w + 1): v for w, v in enumerate(ms)}


FLAT = curve(60, 61, 62, 63, 64, 65, 66, 67, 68)  # torch-like: dear, but a wide pass is nearly free
STEEP = curve(30, 60, 90, 120, 150, 180, 210, 240, 270)  # cheap one token, every row paid again
GROUPED = curve(30, 40, 42, 45, 80, 85, 90, 110, 130)  # llama.cpp Q4_0's groups of rows


def found(targets: dict, draft_ms: float = 5.0) -> dict:
    return {"targets": {n: {"verify_ms": v, "greedy": a, "sampled": a - 0.1, "prefill_tokens_per_s": 100.0}
                        for n, (v, a) in targets.items()}, "draft_ms": draft_ms}


def test_decide_prices_each_runtime_with_its_own_verify_curve():
    # Flat and dear against cheap and steep: speculation's gain decides, not the one-token cost.
    steep = target_choice.decide(found({"torch": (FLAT, 0.8), "llamacpp": (STEEP, 0.8)}))
    assert steep["fastest_plain"] == "llamacpp" and steep["choice"] == "torch"
    assert steep["table"]["llamacpp"]["plain_tokens_per_s"] == pytest.approx(1000 / 30, abs=0.01)
    assert steep["table"]["llamacpp"]["k_greedy"] <= 1 < steep["table"]["torch"]["k_greedy"]
    # Where the cheap runtime's curve has cheap widths, it wins both ways.
    grouped = target_choice.decide(found({"torch": (FLAT, 0.8), "llamacpp": (GROUPED, 0.8)}))
    assert grouped["choice"] == "llamacpp" == grouped["fastest_plain"] and "next best torch" in grouped["why"]
    # The prediction is the cost model's: tokens/s at the best k, never below plain decoding's.
    for row in grouped["table"].values():
        assert row["spec_tokens_per_s_greedy"] >= row["plain_tokens_per_s"] - 1e-6
    # No acceptance at all: plain speed decides.
    blind = target_choice.decide(found({"torch": (FLAT, 0.0), "llamacpp": (STEEP, 0.0)}, draft_ms=5.0))
    assert blind["choice"] == "llamacpp" and blind["table"]["llamacpp"]["k_greedy"] == 0


def test_measure_times_every_candidate_and_leaves_the_runners_empty(target_model, tok):
    targets = {"same": as_runner(target_model), "other": as_runner(tiny.model(hidden=32, layers=1, seed=1))}
    draft = as_runner(tiny.model(hidden=64, layers=2, seed=0))  # the twin of "same"
    ids = target_choice.calibration_ids(tok)
    got = target_choice.measure(targets, draft, ids)
    assert got["targets"]["same"]["greedy"] == 1.0 and got["targets"]["other"]["sampled"] < 0.9
    for m in got["targets"].values():
        assert m["prefill_tokens_per_s"] > 0 and sorted(map(int, m["verify_ms"])) == list(range(1, 10))
    assert got["draft_ms"] > 0
    assert all(r.rows == 0 for r in targets.values()) and draft.rows == 0


def test_choose_measures_once_and_skips_what_cannot_load(tiny_dirs, tmp_path, monkeypatch):
    monkeypatch.setattr(target_choice, "candidates", lambda llamacpp: [tiny_dirs["target"], "/no/such/model"])
    monkeypatch.setattr(target_choice, "reference_draft", lambda llamacpp: tiny_dirs["draft"])
    first = target_choice.choose("float32", cache=tmp_path)
    assert first["choice"] == tiny_dirs["target"] and list(first["skipped"]) == ["/no/such/model"]
    assert first["reference_draft"] == tiny_dirs["draft"] and first["machine"]["cores"] >= 1
    monkeypatch.setattr(target_choice, "measure", lambda *a: pytest.fail("measured again"))
    assert target_choice.choose("float32", cache=tmp_path) == first
    assert target_choice.cached(tmp_path) == [first]
    monkeypatch.setattr(target_choice, "candidates", lambda llamacpp: ["/no/such/model"])
    with pytest.raises(ModelError, match="name one with --target"):
        target_choice.choose("float32", cache=tmp_path)


def test_from_pretrained_resolves_auto_to_the_measured_target(tiny_dirs, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    monkeypatch.setattr(target_choice, "candidates", lambda llamacpp: [tiny_dirs["target"]])
    monkeypatch.setattr(target_choice, "reference_draft", lambda llamacpp: tiny_dirs["draft"])
    from specdecode import SpeculativeGenerator

    gen = SpeculativeGenerator.from_pretrained(target="auto", draft=tiny_dirs["draft"], dtype="float32")
    assert gen.info["target"] == tiny_dirs["target"] and gen.info["target_choice"]["choice"] == tiny_dirs["target"]
    assert "predicted" in gen.info["target_choice"]["why"] and gen.default_proposer == "hybrid-suffix"


def test_the_measured_costs_seed_k_autos_curves():
    from specdecode.models.generator import seed_costs
    from specdecode.policy.costs import PassCosts

    target = target_choice.decide(found({"llamacpp": (GROUPED, 0.8)}))
    target["choice"] = "llamacpp"
    costs = PassCosts()
    seed_costs(costs, target, None)
    assert costs.verify(4) == pytest.approx(0.045) and costs.verify(1) == pytest.approx(0.030)
    assert not costs.draft.points  # no draft measured: its cost is learnt from passes
    drafts = {"choice": "d", "verify_ms": curve(20, 30), "table": {"d": {"draft_ms": 9.0}}}
    costs = PassCosts()
    seed_costs(costs, target, drafts)  # the curve measured beside this very draft wins
    assert costs.verify(2) == pytest.approx(0.030) and costs.draft_step(1) == pytest.approx(0.009)
    assert costs.per_draft == {"draft": pytest.approx(0.009)}  # priced as a source from the first pass
    # A catch-up is priced before one is measured: by the draft's own timed prefill where the choice
    # has it; else the target's measured prefill time a token times the draft's cost against a
    # target step (9 / 20 ms here); without either it is not.
    prefill = target["table"]["llamacpp"]["prefill_tokens_per_s"]
    assert costs.catch_up_seconds(100) == pytest.approx(100 / prefill * 9 / 20)
    timed = {**drafts, "table": {"d": {"draft_ms": 9.0, "prefill_ms_per_token": 1.5}}}
    costs = PassCosts()
    seed_costs(costs, target, timed)
    assert costs.catch_up_seconds(100) == pytest.approx(0.150)
    del target["table"]["llamacpp"]["prefill_tokens_per_s"]
    costs = PassCosts()
    seed_costs(costs, target, drafts)
    assert not costs.catch_up
    empty = PassCosts()
    seed_costs(empty, None, None)
    assert not empty.verify.points and not empty.catch_up


def test_the_chosen_drafts_measured_agreement_is_its_acceptance_before_any_pass():
    """--draft auto measured how often the chosen draft agrees with the target; k=auto starts the
    draft model's acceptance there. At the knob's prior of 0.5 a draft that pays (77% here, a
    third of a target pass a token, a two-token pass 1.15x a one-token one) is priced as not paying,
    so k=auto would never draft from it and never learn better (the control)."""
    from types import SimpleNamespace

    from specdecode.engine.config import EngineConfig
    from specdecode.engine.engine import Engine
    from specdecode.models.generator import seed_draft_prior
    from specdecode.policy.auto_k import AdaptiveK
    from specdecode.policy.costs import CostCurve

    drafts = {"choice": "d", "table": {"d": {"greedy": 0.77, "sampled": 0.76, "draft_ms": 14.0},
                                       "e": {"greedy": 0.9, "sampled": 0.9, "draft_ms": 40.0}}}
    gen = SimpleNamespace(source_priors={}, pooled_acceptance={}, config=EngineConfig())
    seed_draft_prior(gen, drafts)
    # The chosen one's: greedy requests start from its greedy agreement, sampled ones from T = 1's.
    assert gen.source_priors == {("draft", False): 0.77, ("draft", True): 0.76}
    seeded = Engine.pooled(gen, "draft")
    assert seeded.conditional[0] == pytest.approx(0.77)
    assert Engine.pooled(gen, "draft", True).conditional[0] == pytest.approx(0.76)
    assert Engine.pooled(gen, "ngram3").conditional[0] == pytest.approx(EngineConfig().acceptance.prior)
    verify = CostCurve({1: 0.041, 2: 0.048, 3: 0.051, 4: 0.056})
    assert AdaptiveK().best(0.014, verify, seeded)[0] > 0
    unseeded = SimpleNamespace(source_priors={}, pooled_acceptance={}, config=EngineConfig())
    assert AdaptiveK().best(0.014, verify, Engine.pooled(unseeded, "draft"))[0] == 0
    seed_draft_prior(unseeded, None)  # a draft named by the user was not measured: the knob's prior
    assert unseeded.source_priors == {}


def test_a_measured_prior_outweighs_a_few_early_rejections():
    """A chat answer's first tokens are where a small draft agrees least. The measured agreement
    counts as many judged drafts in a source's pooled acceptance, so three rejections at the start of
    one request leave the draft model paying for the next; counted as four judged drafts (the
    control), they turn it off for every request after."""
    from types import SimpleNamespace

    from specdecode.engine.config import EngineConfig
    from specdecode.engine.engine import Engine
    from specdecode.policy.auto_k import AdaptiveK
    from specdecode.policy.costs import CostCurve

    verify = CostCurve({1: 0.0455, 2: 0.0522, 3: 0.0569})
    config = EngineConfig()

    def after_three_rejections(weight):
        gen = SimpleNamespace(source_priors={("draft", False): 0.74}, pooled_acceptance={},
                              config=dataclasses.replace(config, acceptance=dataclasses.replace(
                                  config.acceptance, measured_prior_weight=weight)))
        pooled = Engine.pooled(gen, "draft")
        for _ in range(3):
            pooled.update(1, 0)
        return AdaptiveK().best(0.0133, verify, pooled)[0]

    assert after_three_rejections(config.acceptance.measured_prior_weight) > 0
    assert after_three_rejections(4.0) == 0


def test_a_fresh_engine_drafts_from_the_measured_draft_on_its_first_request(target_model, tok):
    """The costs and agreement --draft auto measured price the draft model from the first pass. At
    77% agreement, a draft token a third of a target pass and this curve, k = 1-2 pays and k = 4
    (the controller's first allowance) does not: when the draft was unpriced, the catch-up over the
    prompt was weighed at k = 4, refused, and the draft model never drafted in a new process. The
    control: a draft measured at twice a target pass is never asked."""
    from specdecode.models.generator import SpeculativeGenerator, seed_costs, seed_draft_prior
    from specdecode.sampling.params import SamplingParams

    verify = curve(43.2, 48.4, 53.6, 58.8, 68.6, 77.3, 82.6, 88.5, 114.9)

    def first_sources(draft_ms):
        choice = {"choice": "d", "verify_ms": verify,
                  "table": {"d": {"draft_ms": draft_ms, "prefill_ms_per_token": 1.56, "greedy": 0.77,
                                  "sampled": 0.76}}}
        gen = SpeculativeGenerator.from_models(target_model, tok, "hybrid", target_model, tok)
        seed_costs(gen.pass_costs, None, choice)
        seed_draft_prior(gen, choice)
        prompt = list(range(5, 15))  # no token twice: the lookup finds nothing to draft at first
        out = gen.generate(prompt, SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True), k="auto",
                           chat=False, proposer="hybrid")
        return out.stats["by_source"]

    assert first_sources(16.0).get("draft", [0])[0] > 0
    assert "draft" not in first_sources(90.0)


def test_a_named_draft_measured_beside_the_target_is_priced_like_auto_s_pick(target_model, tok, monkeypatch, tmp_path):
    """`--draft llamacpp:default@q4_0+v16k` named by hand, where --draft auto measured that draft
    beside the same target on this machine, starts from that measurement (its price, its catch-up,
    its agreement), as the draft auto picks does: with the knob's prior it was barely asked on short
    code requests. A draft or target the measurement did not cover keeps the knob's prior."""
    from types import SimpleNamespace

    from specdecode.engine.config import EngineConfig
    from specdecode.models import draft_choice, measured
    from specdecode.models.backends import llamacpp
    from specdecode.models.generator import draft_measurements, seed_draft_prior
    from specdecode.models.loader import backend_name

    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    table = {"fast": {"greedy": 0.7, "sampled": 0.6, "draft_ms": 9.0},
             "good": {"greedy": 0.8, "sampled": 0.8, "draft_ms": 20.0}}
    path = draft_choice.cache_path("target-spec", backend_name(target_model), "bfloat16", "bfloat16",
                                   draft_choice.candidates(llamacpp.available()))
    measured.write(path, {"choice": "good", "why": "w", "table": table, "verify_ms": curve(30, 32, 35)})

    found = draft_measurements("target-spec", target_model, tok, "fast", "bfloat16")
    assert found["choice"] == "fast" and found["verify_ms"] == curve(30, 32, 35)
    gen = SimpleNamespace(source_priors={}, pooled_acceptance={}, config=EngineConfig())
    seed_draft_prior(gen, found)
    assert gen.source_priors == {("draft", False): 0.7, ("draft", True): 0.6}  # the named draft's, not the pick's
    assert draft_measurements("target-spec", target_model, tok, "unmeasured", "bfloat16") is None
    assert draft_measurements("another-target", target_model, tok, "fast", "bfloat16") is None
    assert draft_measurements("target-spec", target_model, tok, "fast", "float32") is None
    assert draft_measurements("target-spec", target_model, tok, None, "bfloat16") is None
