"""Benchmark workloads: the bundled Spec-Bench questions, code prompts and a repetitive workload, a
user's JSONL, a prompt-length sweep."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# Spec-Bench reports MT-bench's eight sub-categories as one category (in its own file only: another
# file's "extraction" stays "extraction").
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


class WorkloadError(ValueError):
    """A workload file or option is malformed; the message names the line and the problem."""


@dataclass
class Prompt:
    id: str
    category: str
    subcategory: str
    turns: list[str]


def spec_bench_path() -> Path:
    return workload_path("spec-bench")


def load_jsonl(path: Path, spec_bench: bool | None = None) -> list[Prompt]:
    """Spec-Bench format: one JSON object a line with `turns` (list of user messages), optional
    `category` and `question_id`. spec_bench: group MT-bench's sub-categories under mt_bench
    (default: for the bundled Spec-Bench file only)."""
    if spec_bench is None:
        spec_bench = path.resolve() == spec_bench_path().resolve()
    if not path.is_file():
        raise WorkloadError(f"workload file not found: {path} (use 'spec-bench' or a JSONL file)")
    prompts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path} line {number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(row, dict):
            raise WorkloadError(f"{path} line {number}: expected a JSON object, got {type(row).__name__}")
        turns = row.get("turns")
        if turns is None:
            raise WorkloadError(f"{path} line {number}: missing field 'turns' (a list of user messages)")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise WorkloadError(f"{path} line {number}: 'turns' must be a non-empty list of non-empty strings")
        category = row.get("category", "custom")
        if not isinstance(category, str) or not category:
            raise WorkloadError(f"{path} line {number}: 'category' must be a non-empty string")
        sub = category
        if spec_bench and category in MT_BENCH:
            category = "mt_bench"
        prompts.append(Prompt(str(row.get("question_id", number)), category, sub, list(turns)))
    if not prompts:
        raise WorkloadError(f"{path}: no prompts in the file")
    return prompts


def select(prompts: list[Prompt], categories: list[str] | None, limit: int | None) -> list[Prompt]:
    """Filter by category (or MT-bench sub-category) and take `limit` prompts, an equal number per
    category (the remainder to the first categories), spread over sub-categories, interleaved."""
    if categories:
        known = {p.category for p in prompts} | {p.subcategory for p in prompts}
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise WorkloadError(f"unknown categories {unknown}; this workload has {sorted(known)}")
        # A sub-category asked for by name (e.g. MT-bench's "coding") is reported under that name.
        prompts = [p if p.category in categories else dataclasses.replace(p, category=p.subcategory)
                   for p in prompts if p.category in categories or p.subcategory in categories]
    groups: dict[str, list[Prompt]] = {}
    for p in prompts:
        groups.setdefault(p.category, []).append(p)
    if limit is None:
        return prompts
    if limit < 1:
        raise WorkloadError(f"--limit must be >= 1, got {limit}")
    names = list(groups)
    share = {name: limit // len(names) + (1 if i < limit % len(names) else 0) for i, name in enumerate(names)}
    picked = {name: _spread(groups[name], share[name]) for name in names}
    out = []
    for i in range(max(share.values())):
        for name in names:
            if i < len(picked[name]):
                out.append(picked[name][i])
    return out


def _spread(group: list[Prompt], n: int) -> list[Prompt]:
    """n prompts taken round-robin over sub-categories, so MT-bench's 8 kinds are all represented."""
    subs: dict[str, list[Prompt]] = {}
    for p in group:
        subs.setdefault(p.subcategory, []).append(p)
    out: list[Prompt] = []
    i = 0
    while len(out) < min(n, len(group)):
        for items in subs.values():
            if i < len(items) and len(out) < n:
                out.append(items[i])
        i += 1
    return out


BUNDLED_WORKLOADS = {
    "spec-bench": "spec_bench_question.jsonl",  # 480 prompts, 6 categories (see data/NOTICE.md)
    "code": "code_completion.jsonl",  # 24 prompts asking to complete, write, fix or test Python functions
    # 40 extractions into one JSON schema and 4 four-turn code-edit conversations (--turns all): what
    # repeats across requests (bench/repetitive_workload.py makes it)
    "repetitive": "repetitive.jsonl",
}


def workload_path(name: str) -> Path:
    if name in BUNDLED_WORKLOADS:
        return Path(str(resources.files("specdecode") / "data" / BUNDLED_WORKLOADS[name]))
    return Path(name).expanduser()


def load_workload(spec: str, categories: list[str] | None = None, limit: int | None = None) -> list[Prompt]:
    """spec: a bundled name (spec-bench, code, repetitive) or a JSONL path, or several joined by commas."""
    prompts = [p for part in spec.split(",") if part.strip() for p in load_jsonl(workload_path(part.strip()))]
    return select(prompts, categories, limit)


def length_sweep(tokenizer, lengths: list[int]) -> list[Prompt]:
    """Prompts of about N tokens each, cut from real text (Spec-Bench's news articles and retrieved
    passages), ending with a request the model can act on."""
    corpus = [p.turns[0] for p in load_jsonl(spec_bench_path()) if p.category in ("summarization", "rag")]
    text = "\n\n".join(corpus)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    instruction = "\n\nSummarize the text above in a few sentences."
    prompts = []
    for n in lengths:
        if n < 16:
            raise WorkloadError(f"--prompt-lengths must be >= 16 tokens, got {n}")
        if n > len(ids):
            raise WorkloadError(f"--prompt-lengths {n} is longer than the bundled text ({len(ids)} tokens)")
        body = tokenizer.decode(ids[:n])
        prompts.append(Prompt(f"len{n}", f"len{n}", f"len{n}", [body + instruction]))
    return prompts
