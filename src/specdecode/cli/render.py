"""Tables the commands print."""

from __future__ import annotations

from collections import Counter

from rich.table import Table

from . import out


def print_verify_report(report: dict, tokenizer, draws: dict) -> None:
    out.print(f"prompt: {report['prompt']!r}; {report['samples']} continuations of {report['length']} tokens per "
              f"method; temperature {report['temperature']}, top_k {report['top_k']}, top_p {report['top_p']}, "
              f"min_p {report['min_p']}; k={report['k']}; alpha={report['alpha']}"
              + ("; NAIVE residual (wrong on purpose)" if report["naive"] else ""), highlight=False)
    top = Counter(draws["none"]).most_common(5)
    out.print("most frequent plain continuations: " + ", ".join(
        f"{tokenizer.decode(list(seq))!r} {c}" for seq, c in top), highlight=False, markup=False)
    table = Table("method", "test", "cells", "chi2", "p-value", "TV", "TV bound", "result")
    first = report["plain_first_token_exact"]
    table.add_row("plain", "first token vs exact p", str(first["cells"]), f"{first['chi2']:.1f}",
                  f"{first['p_value']:.3g}", f"{first['tv_distance']:.3f}", f"{first['tv_bound']:.3f}",
                  "pass" if first["passed"] else "FAIL")
    for name, r in report["results"].items():
        for label, row in ((f"{report['length']}-token joint vs plain", {**r, "passed": r["joint_passed"]}),
                           ("first token vs exact p", r.get("first_token_exact"))):
            if row is None:
                continue
            table.add_row(name, label, str(row["cells"]), f"{row['chi2']:.1f}", f"{row['p_value']:.3g}",
                          f"{row['tv_distance']:.3f}", f"{row['tv_bound']:.3f}", "pass" if row["passed"] else "FAIL")
    out.print(table)
    out.print("PASSED: speculative output matches the target's distribution" if report["passed"] else
              "FAILED: speculative output does not match the target's distribution")


def print_plan(r: dict) -> None:
    gb = 1e9
    t = r["target"]
    out.print(f"target {t['name']}: {t['params'] / 1e9:.2f}B params, {t['layers']} layers, hidden {t['hidden']}, "
              f"{t['kv_heads']} KV heads x {t['head_dim']}; weights {r['dtype']}, KV cache {r['kv_dtype']}",
              highlight=False)
    if r["draft"]:
        out.print(f"draft {r['draft']['name']}: {r['draft']['params'] / 1e9:.2f}B params ({r['draft_dtype']})",
                  highlight=False)
    d = r["device"]
    out.print(f"device {d['name']}: {d['memory_gb']:g} GB, {d['bandwidth_gbs']:g} GB/s, {d['bf16_tflops']:g} TFLOPS "
              f"bf16, link {d['link_gbs']:g} GB/s; context {r['context']}, concurrency {r['concurrency']}",
              highlight=False)
    mem = Table("memory", "bytes")
    for label, key in (("target weights", "weight_bytes"), ("KV cache (all sequences)", "kv_bytes_total"),
                       ("draft weights + KV", "draft_bytes"), ("workspace allowance", "workspace_bytes"),
                       ("total", "total_bytes"), (f"per device at TP={r['num_gpus']}", "bytes_per_device"),
                       ("device budget", "device_budget_bytes")):
        mem.add_row(label, f"{r[key] / gb:.2f} GB")
    mem.add_row("KV cache per token", f"{r['kv_bytes_per_token'] / 1024:.1f} KiB")
    out.print(mem)
    tp = r["min_tensor_parallel"]
    out.print(f"fits on one device: {'yes' if r['fits_one_device'] else 'NO'}; fits at TP={r['num_gpus']}: "
              f"{'yes' if r['fits'] else 'NO'}; minimum tensor-parallel degree: {tp if tp else 'none up to 64'}",
              highlight=False)
    if not r["fits_one_device"]:
        out.print(f"(weights / one device's bandwidth = {r['weight_bytes'] / (d['bandwidth_gbs'] * 1e9) * 1000:.1f} ms "
                  "is not a valid latency here: the model does not fit on one device, so each of the "
                  f"{r['num_gpus']} devices reads its shard and the all-reduces are added)", highlight=False)
    p = r["plain_pass"]
    out.print(f"plain decode pass: memory {p['memory_s'] * 1000:.2f} ms, compute {p['compute_s'] * 1000:.2f} ms, "
              f"all-reduce {p['allreduce_s'] * 1000:.2f} ms, overhead {p['overhead_s'] * 1000:.2f} ms -> "
              f"ITL >= {r['plain_itl_s'] * 1000:.2f} ms ({r['plain_tokens_per_s_per_request']:.1f} tok/s per request)",
              highlight=False)
    if r["speculative"]:
        table = Table("k", "tokens/pass", "draft pass ms", "verify pass ms", "ITL ms", "speedup", "Leviathan")
        for row in r["speculative"]:
            table.add_row(str(row["k"]), f"{row['expected_tokens_per_pass']:.2f}", f"{row['draft_pass_s'] * 1000:.2f}",
                          f"{row['verify_pass_s'] * 1000:.2f} ({row['verify_bound']})", f"{row['itl_s'] * 1000:.2f}",
                          f"{row['speedup']:.2f}x", f"{row['leviathan_speedup']:.2f}x")
        out.print(table)
        out.print(f"acceptance {r['acceptance']:.2f}: recommended k = {r['recommended_k']}", highlight=False)
    out.print("assumptions: " + "; ".join(r["assumptions"]), highlight=False)
