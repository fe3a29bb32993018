"""At T = 1, is drafting the draft model's argmax (a one-hot q, accepted with chance p(argmax q)) worth
more than drafting a sample of q (accepted with chance sum min(p, q))? Both measured position by position
on the target's own T = 1 continuations (48 tokens of 8 code prompts and of the Spec-Bench mix, 2 prompts a
category), binned by the draft's top probability, the one thing a proposer knows before the target scores.
Usage: .venv/bin/python docs/results/xeon-7/argmax_draft_t1.py > OUT.json (about 5 minutes on 2 cores)."""
import json, sys, torch, numpy as np
from importlib import resources
from specdecode.models.loader import load
torch.manual_seed(0)
target, tok = load("llamacpp:default@q4_0", "target", "auto")
draft, _ = load("llamacpp:default@q4_0+v32k", "draft", "auto")
def prompts(name, n):
    rows = [json.loads(l) for l in (resources.files("specdecode") / "data" / name).read_text().splitlines()]
    if name.startswith("spec"):
        seen, out = {}, []
        for r in rows:
            if seen.get(r["category"], 0) < 2: seen[r["category"]] = seen.get(r["category"], 0) + 1; out.append(r)
        rows = out
    return [r["turns"][0] for r in rows[:n]]
res = {}
for name, n in (("code_completion.jsonl", 8), ("spec_bench_question.jsonl", 40)):
    S, A, Q = [], [], []
    for text in prompts(name, n):
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False), add_special_tokens=False)
        if len(ids) > 900: continue
        target.add_rows(ids[:-1]); out = []
        feed = [ids[-1]]
        for _ in range(48):
            lg = target.forward([feed], last_only=True)[0][-1].float()
            t = int(torch.multinomial(lg.softmax(-1), 1)); out.append(t); feed = [t]
        target.remove_rows([0])
        full = ids + out
        target.add_rows(full[:1]); P = target.forward([full[1:]])[0].float(); target.remove_rows([0])
        draft.add_rows(full[:1]); Ql = draft.forward([full[1:]])[0].float(); draft.remove_rows([0])
        pos = slice(len(ids) - 1, len(full) - 1)
        p = P[pos].softmax(-1); w = Ql.shape[-1]; q = Ql[pos].softmax(-1)
        S += torch.minimum(p[:, :w], q).sum(-1).tolist()
        A += p[torch.arange(p.shape[0]), q.argmax(-1)].tolist()
        Q += q.max(-1).values.tolist()
    S, A, Q = map(np.array, (S, A, Q))
    r = {"n": len(S), "sampled": S.mean(), "argmax": A.mean(), "oracle": np.maximum(S, A).mean()}
    for th in (0.3, 0.5, 0.7, 0.9):
        r[f"argmax_below_{th}"] = np.where(Q < th, A, S).mean()
    r["bins"] = {f"{lo:.1f}-{lo+0.2:.1f}": (int(((Q >= lo) & (Q < lo + .2)).sum()), round(S[(Q >= lo) & (Q < lo + .2)].mean(), 3),
                 round(A[(Q >= lo) & (Q < lo + .2)].mean(), 3)) for lo in (0, .2, .4, .6, .8) if ((Q >= lo) & (Q < lo + .2)).any()}
    res[name] = r
    pass
print(json.dumps(res, default=float, indent=1))
