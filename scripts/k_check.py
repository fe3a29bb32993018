"""Check `tune`'s choices against a `bench` k sweep run on the same models and prompts.

    python scripts/k_check.py TUNE.json BENCH_DIR/results.json

Prints markdown: per category, the best fixed (proposer, k) in the bench and how fast tune's pick
for that category ran in the same bench (ratio), and for both the predicted against the measured
tokens per pass and pass costs (which part of the model a miss came from); over all categories,
k=auto against the best fixed k of the same proposer; and tune's predicted tokens/s against the
measured one. Speeds are
decode tokens/s (prefill excluded, as in tune's model: the prefill is the same for every k).
"""

import json
import sys


def decode_rate(r: dict) -> float:
    decode = r["total_s"] - (r.get("prefill_s") or 0.0)
    return r["new_tokens"] / decode if decode > 0 else 0.0


def per_pass(r: dict) -> tuple[float, float, float, float]:
    """Measured tokens per pass and seconds per pass (all, draft, verify), prefill excluded (it emits
    no token: the first one comes from the first pass, as every other)."""
    passes = max(r["target_passes"], 1)
    decode = r["total_s"] - (r.get("prefill_s") or 0.0)
    return r["new_tokens"] / passes, decode / passes, r["draft_s"] / passes, r["verify_s"] / passes


def diagnose(tune: dict, by: dict, best_of: dict) -> None:
    """Per category, tune's pick and the bench's best: predicted against measured tokens per pass and
    pass costs, so that a miss says whether acceptance or which cost was mis-modelled."""
    print("| category | setting | tokens/pass pred / bench | pass ms pred / bench | draft ms | verify ms |")
    print("|---|---|---|---|---|---|")
    for cat, best in best_of.items():
        pick = tune["per_category"][cat]
        rows = {(r["proposer"], r["k"]): r for r in pick["table"]}
        for setting in dict.fromkeys([(pick["proposer"], pick["k"]), best]):
            pred, rec = rows.get(setting), by.get((*setting, cat))
            if not pred or not rec:
                continue
            tokens, pass_s, draft_s, verify_s = per_pass(rec)
            c = pred["costs"]
            print(f"| {cat} | {setting[0]} k={setting[1]} | {pred['expected_tokens_per_pass']:.2f} / {tokens:.2f} | "
                  f"{pred['pass_s'] * 1e3:.0f} / {pass_s * 1e3:.0f} | {c['draft_s'] * 1e3:.0f} / {draft_s * 1e3:.0f} | "
                  f"{c['verify_s'] * 1e3:.0f} / {verify_s * 1e3:.0f} |")
    print()


def main(tune_path: str, bench_path: str) -> None:
    tune = json.loads(open(tune_path).read())
    records = json.loads(open(bench_path).read())
    by = {(r["method"], r["k"], r["category"]): r for r in records}
    cats = sorted({r["category"] for r in records} - {"all"})
    # The best fixed k among the proposers tune chose from; k=auto is compared with every fixed k.
    considered = {row["proposer"] for row in tune["table"]} - {"none"}
    fixed = [(m, k) for (m, k, c) in by if c == "all" and m in considered and isinstance(k, int)]
    every_fixed = [(m, k) for (m, k, c) in by if c == "all" and m in ("draft", "ngram", "hybrid")
                   and isinstance(k, int)]
    print("| category | best fixed k (bench) | tok/s | tune's pick | its tok/s in the bench | ratio | plain tok/s |")
    print("|---|---|---|---|---|---|---|")
    best_of = {cat: max(fixed, key=lambda mk: decode_rate(by[(*mk, cat)])) for cat in cats + ["all"]}
    for cat, best in best_of.items():
        pick = tune["per_category"][cat] if cat != "all" else tune
        mine = by.get((pick["proposer"], pick["k"], cat))
        best_rate = decode_rate(by[(*best, cat)])
        mine_rate = decode_rate(mine) if mine else float("nan")
        plain = decode_rate(by[("plain", None, cat)])
        print(f"| {cat} | {best[0]} k={best[1]} | {best_rate:.2f} | {pick['proposer']} k={pick['k']} | "
              f"{mine_rate:.2f} | {mine_rate / best_rate:.0%} | {plain:.2f} |")
    print()
    diagnose(tune, by, {cat: best_of[cat] for cat in cats})
    print("| proposer | k=auto tok/s (all) | best fixed k | its tok/s | auto / best |")
    print("|---|---|---|---|---|")
    for proposer in ("draft", "ngram", "hybrid"):
        auto = by.get((proposer, "auto", "all"))
        ks = [k for m, k in every_fixed if m == proposer]
        if not auto or not ks:
            continue
        best_k = max(ks, key=lambda k: decode_rate(by[(proposer, k, "all")]))
        b = decode_rate(by[(proposer, best_k, "all")])
        print(f"| {proposer} | {decode_rate(auto):.2f} | {best_k} | {b:.2f} | {decode_rate(auto) / b:.2f}x |")
    autos = [m for (m, k, c) in by if c == "all" and k == "auto"]
    if autos and every_fixed:
        best_auto = max(autos, key=lambda m: decode_rate(by[(m, "auto", "all")]))
        best_fixed = max(every_fixed, key=lambda mk: decode_rate(by[(*mk, "all")]))
        a, f = decode_rate(by[(best_auto, "auto", "all")]), decode_rate(by[(*best_fixed, "all")])
        print(f"| best of all | {best_auto} auto {a:.2f} | {best_fixed[0]} k={best_fixed[1]} | {f:.2f} | {a / f:.2f}x |")
    print()
    pred, meas = tune["predicted_tokens_per_s"], tune.get("measured_tokens_per_s")
    rec = by.get((tune["proposer"], tune["k"], "all"))
    line = f"tune recommends {tune['proposer']} k={tune['k']}: predicted {pred:.2f} tok/s"
    if meas:
        line += f", measured by tune {meas:.2f} ({pred / meas - 1:+.0%})"
    if rec:
        line += f", measured in the bench {decode_rate(rec):.2f} ({pred / decode_rate(rec) - 1:+.0%})"
    print(line)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
