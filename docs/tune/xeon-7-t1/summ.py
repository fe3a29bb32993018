import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
agg = collections.defaultdict(lambda: collections.defaultdict(float))
src = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0, 0]))
for r in rows:
    a = agg[r["config"]]
    a["n"] += 1; a["new"] += r["new"]; a["total"] += r["total"]; a["dec_tok"] += r["new"] - 1; a["dec_s"] += r["total"] - r["ttft"]
    a["draft_s"] += r["draft_s"]; a["verify_s"] += r["verify_s"]; a["passes"] += r["passes"]
    for s, c in r["by_source"].items():
        for j in range(3): src[r["config"]][s][j] += c[j]
plain = agg["plain"]
for name, a in agg.items():
    dec = a["dec_tok"] / a["dec_s"]; tot = a["new"] / a["total"]
    print(f"{name:20} n={int(a['n'])} decode {dec:.2f} tok/s ({dec / (plain['dec_tok'] / plain['dec_s']):.2f}x)  whole {tot:.2f} "
          f"({tot / (plain['new'] / plain['total']):.2f}x)  passes {int(a['passes'])} draft_s {a['draft_s']:.1f} "
          f"verify_s {a['verify_s']:.1f}  {dict(src[name])}")
