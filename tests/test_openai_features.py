"""What OpenAI clients send every day, through the official `openai` client against a live server:
logprobs, n, structured output, penalties, logit bias, and the speculation stats on every response."""

import json

import openai
import pytest

from live_server import live_server
from specdecode import EngineConfig, SpeculativeGenerator
from specdecode.server import create_app

MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "abc"}]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 50}},
          "required": ["name", "n"], "additionalProperties": False, "x-guidance": {"whitespace_flexible": False}}


@pytest.fixture(scope="module")
def client(near_draft_gen):
    """A server whose draft is sometimes wrong (rejections and residual tokens in every response)."""
    draft = near_draft_gen.proposers["draft"].runner.model
    engine = SpeculativeGenerator.from_models(near_draft_gen.target.model, near_draft_gen.tokenizer, "draft", draft,
                                              near_draft_gen.tokenizer,
                                              config=EngineConfig(max_batch=8, load_policy=False))
    with live_server(create_app(engine, MODEL, default_k=3)) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)


def spec(k):
    return {"speculative": {"k": k}, "ignore_eos": True}


# -- logprobs ----------------------------------------------------------------------------------

def test_chat_logprobs_speculative_equal_plain_streamed_or_not(client):
    runs = {}
    for k in (0, 3):
        full = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0,
                                              logprobs=True, top_logprobs=3, extra_body=spec(k))
        runs[k] = full.choices[0].logprobs.content
        assert len(runs[k]) == 12 and all(len(t.top_logprobs) == 3 for t in runs[k])
        assert all(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in runs[k])
        streamed = [c for c in client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0, logprobs=True, top_logprobs=3, stream=True,
            extra_body=spec(k)) if c.choices and c.choices[0].logprobs]
        entries = [t for c in streamed for t in c.choices[0].logprobs.content]
        assert [(t.token, t.bytes) for t in entries] == [(t.token, t.bytes) for t in runs[k]]
        assert all(abs(a.logprob - b.logprob) < 1e-5 for a, b in zip(entries, runs[k]))
    assert full.speculative["accepted_tokens"] > 0 and full.speculative["drafted_tokens"] > full.speculative[
        "accepted_tokens"]  # drafts accepted and rejected in the speculative run
    assert [t.token for t in runs[0]] == [t.token for t in runs[3]]
    assert all(abs(a.logprob - b.logprob) < 1e-5 for a, b in zip(runs[0], runs[3]))


def test_completion_logprobs_legacy_format(client):
    out = client.completions.create(model=MODEL, prompt="abab", max_tokens=6, temperature=0, logprobs=2,
                                    extra_body=spec(3))
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    # Special tokens are shown by name in the logprobs, and left out of the text.
    assert "".join(t for t in lp.tokens if not (t.startswith("<|") and t.endswith("|>"))) == out.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(6)]
    assert all(len(top) <= 2 and max(top.values()) >= lp.token_logprobs[i] - 1e-6 for i, top in enumerate(lp.top_logprobs))
    chunks = [c for c in client.completions.create(model=MODEL, prompt="abab", max_tokens=6, temperature=0,
                                                    logprobs=2, stream=True, extra_body=spec(3)) if c.choices]
    offsets = [o for c in chunks if c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
    assert offsets == lp.text_offset


def test_processed_logprobs_are_the_sampled_distribution(client):
    out = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=1.0, seed=4,
                                         logprobs=True, top_logprobs=3,
                                         extra_body=spec(3) | {"top_k": 2, "logprobs_mode": "processed"})
    for t in out.choices[0].logprobs.content:
        assert t.top_logprobs[2].logprob == -9999.0  # outside the top 2
        assert t.logprob > -9999.0


# -- n ---------------------------------------------------------------------------------------------

def test_n_choices_seeded_as_seed_plus_i(client):
    body = dict(model=MODEL, max_tokens=8, temperature=1.0, seed=10, extra_body=spec(3))
    both = client.chat.completions.create(messages=MESSAGES, n=3, **body)
    assert [c.index for c in both.choices] == [0, 1, 2]
    assert both.usage.completion_tokens == 24 and both.usage.prompt_tokens < 24
    for i, choice in enumerate(both.choices):
        alone = client.chat.completions.create(messages=MESSAGES, **(body | {"seed": 10 + i}))
        assert choice.message.content == alone.choices[0].message.content
    texts = {c.message.content for c in both.choices}
    assert len(texts) > 1
    streamed = {}
    for c in client.chat.completions.create(messages=MESSAGES, n=3, stream=True, **body):
        for choice in c.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + (choice.delta.content or "")
    assert [streamed[i] for i in range(3)] == [c.message.content for c in both.choices]
    done = client.completions.create(prompt="xy", n=2, **body)
    assert len(done.choices) == 2 and done.usage.completion_tokens == 16
    pieces = {}
    for c in client.completions.create(prompt="xy", n=2, stream=True, **body):
        for choice in c.choices:
            pieces[choice.index] = pieces.get(choice.index, "") + choice.text
    assert [pieces[0], pieces[1]] == [c.text for c in done.choices]


# -- structured output ---------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output_parses_chat_and_completions(client, stream):
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    for seed in range(4):
        body = dict(model=MODEL, max_tokens=80, temperature=1.0, seed=seed, stream=stream)
        chat = client.chat.completions.create(messages=MESSAGES, response_format=rf, **body)
        text = client.completions.create(prompt="person:", extra_body={"response_format": rf}, **body)
        if stream:
            chat = "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
            text = "".join(c.choices[0].text for c in text if c.choices)
        else:
            chat, text = chat.choices[0].message.content, text.choices[0].text
        for out in (chat, text):
            value = json.loads(out)
            assert set(value) == {"name", "n"} and 0 <= value["n"] <= 50


def test_the_clients_parse_helper_gets_its_pydantic_model(client):
    """`client.chat.completions.parse(response_format=Model)` sends a strict json_schema built from a
    pydantic model and parses the reply into it: what most structured-output code does."""
    from pydantic import BaseModel, Field

    class Item(BaseModel):
        label: str = Field(max_length=6)
        count: int = Field(ge=0, le=9)

    for seed in range(3):
        out = client.chat.completions.parse(model=MODEL, messages=MESSAGES, max_tokens=120, temperature=1.0,
                                            seed=seed, response_format=Item)
        item = out.choices[0].message.parsed
        assert isinstance(item, Item) and 0 <= item.count <= 9


def test_json_object_regex_choice_and_grammar(client):
    body = dict(model=MODEL, messages=MESSAGES, max_tokens=120, temperature=1.0)
    for seed in range(3):
        out = client.chat.completions.create(response_format={"type": "json_object"}, seed=seed, **body)
        assert isinstance(json.loads(out.choices[0].message.content), dict)
    out = client.chat.completions.create(extra_body={"guided_regex": "[a-c]{4}"}, seed=1, **body)
    assert len(out.choices[0].message.content) == 4 and set(out.choices[0].message.content) <= set("abc")
    out = client.chat.completions.create(extra_body={"guided_choice": ["red", "green"]}, seed=1, **body)
    assert out.choices[0].message.content in ("red", "green")
    out = client.chat.completions.create(extra_body={"structured_outputs": {"grammar": 'start: "x" ("y" | "z")'}},
                                         seed=1, **body)
    assert out.choices[0].message.content in ("xy", "xz")


# -- penalties and logit bias --------------------------------------------------------------------

def test_penalties_and_logit_bias_change_the_output_the_same_way_with_and_without_speculation(client, tok):
    base = dict(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0)
    plain = client.chat.completions.create(extra_body=spec(0), **base).choices[0].message.content
    penal = dict(presence_penalty=1.5, frequency_penalty=1.0, extra_body={"repetition_penalty": 1.3})
    outs = [client.chat.completions.create(**base, **(penal | {"extra_body": penal["extra_body"] | spec(k)}))
            .choices[0].message.content for k in (0, 3)]
    assert outs[0] == outs[1] != plain
    a = tok.convert_tokens_to_ids("a")
    biased = client.chat.completions.create(**base, logit_bias={str(a): 100}, extra_body=spec(3))
    assert biased.choices[0].message.content == "a" * 16
    # Completions, streamed and not, take the same fields.
    body = dict(model=MODEL, prompt="abc", max_tokens=12, temperature=0, presence_penalty=1.5, frequency_penalty=1.0,
                extra_body={"repetition_penalty": 1.3} | spec(3))
    whole = client.completions.create(**body).choices[0].text
    pieces = "".join(c.choices[0].text for c in client.completions.create(stream=True, **body) if c.choices)
    unpenalised = client.completions.create(model=MODEL, prompt="abc", max_tokens=12, temperature=0,
                                            extra_body=spec(3)).choices[0].text
    assert whole == pieces != unpenalised


# -- speculation stats and bad values ------------------------------------------------------------

def test_speculation_stats_in_the_final_stream_chunk(client):
    chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, temperature=0,
                                                 stream=True, stream_options={"include_usage": True},
                                                 extra_body=spec(3)))
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason][0]
    stats = final.speculative
    assert stats["target_passes"] >= 1 and 0 <= stats["acceptance_rate"] <= 1
    assert abs(stats["tokens_per_pass"] - 10 / stats["target_passes"]) < 1e-9
    assert chunks[-1].usage.completion_tokens == 10 and chunks[-1].speculative == stats


@pytest.mark.parametrize("kwargs, field", [
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs needs logprobs"),
    ({"n": 0}, "n must be"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "blob"}}}},
     "json constraint is invalid"),
    ({"presence_penalty": -2.5}, "presence_penalty"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
])
def test_bad_values_get_a_400_naming_the_field(client, kwargs, field):
    with pytest.raises(openai.BadRequestError, match=field):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, **kwargs)
