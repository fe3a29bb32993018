"""Which k for a server that is already running: its own acceptance, priced by k=auto's cost model.

The server's Prometheus counters are read before and after a workload (or a passive window), and
the difference gives what speculation did meanwhile:

- per position (vLLM's `vllm:spec_decode_num_accepted_tokens_per_pos{position=i}`, llama-server's
  under `llamacpp:`, ours under `specdecode:`): A_i = accepted at position i / passes, the fraction of passes whose draft i was
  accepted, exact for every k up to the server's own. Passes = generated tokens - accepted ones
  (each pass emits one token more than it accepts; `..._generation_tokens`), since a lookup
  proposer drafts nothing in some passes, which still emit a token; without that counter, the
  passes that drafted;
- totals only (`..._num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`): one conditional
  rate r fitted so that k drafts a pass, each accepted with chance r given the ones before, accept
  what was accepted (an i.i.d. model of acceptance: said so in the report).

With a verify-cost curve (seconds of one pass by the tokens in it: `--cost-curve`, from our `tune`,
or c = a draft step as a fraction of a one-token pass: `--draft-cost`), each k's tokens per second
at concurrency C is C (1 + A_1 + ... + A_k) / (verify(C (1 + k)) + k C draft), and plain decoding's is
C / verify(C): the same rule as costs.best_k. A pass scores 1 + (share of passes that draft) x
min(k, drafts per drafting pass) tokens on average, as `tune` prices a lookup's shorter drafts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..policy.costs import CostCurve, best_k

ENGINES = {"vllm:": "vllm", "sglang:": "sglang", "specdecode:": "specdecode", "llamacpp:": "llamacpp"}
LINE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>[-+0-9.eE]+|NaN)$")


class TuneError(ValueError):
    """What tune --endpoint cannot do with what the server exposes: one line, what to do."""


@dataclass
class Counters:
    engine: str | None = None
    drafts: float = 0.0  # passes that checked drafts
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    generated: float | None = None  # output tokens, where the server counts them

    def __sub__(self, before: "Counters") -> "Counters":
        positions = set(self.per_pos) | set(before.per_pos)
        # A labelled counter appears on the page at its first increment: absent before means 0.
        generated = None if self.generated is None else self.generated - (before.generated or 0.0)
        return Counters(self.engine or before.engine, self.drafts - before.drafts,
                        self.draft_tokens - before.draft_tokens, self.accepted - before.accepted,
                        {p: self.per_pos.get(p, 0.0) - before.per_pos.get(p, 0.0) for p in positions}, generated)


def parse_metrics(text: str) -> Counters:
    """The speculative counters of a Prometheus text page, summed over labels (engines, models)."""
    found = Counters()
    for raw in text.splitlines():
        m = LINE.match(raw.strip())
        if not m or raw.startswith("#"):
            continue
        name = m.group("name")
        for prefix, engine in ENGINES.items():
            if name.startswith(prefix):
                found.engine = found.engine or engine
        base = name.removesuffix("_total")
        value = float(m.group("value"))
        if base.endswith("spec_decode_num_accepted_tokens_per_pos"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels") or ""))
            if "position" in labels:
                pos = int(labels["position"])
                found.per_pos[pos] = found.per_pos.get(pos, 0.0) + value
        elif base.endswith("spec_decode_num_drafts"):
            found.drafts += value
        elif base.endswith("spec_decode_num_draft_tokens"):
            found.draft_tokens += value
        elif base.endswith("spec_decode_num_accepted_tokens"):
            found.accepted += value
        elif base.endswith((":generation_tokens", "llamacpp:tokens_predicted")):
            found.generated = (found.generated or 0.0) + value
    return found


@dataclass
class Acceptance:
    accepted_at: list[float]  # A_i, i = 1..K: fraction of passes whose draft i was accepted
    server_k: float  # drafts per drafting pass the server made (mean)
    model: str  # "per-position" or "i.i.d. fit"
    passes: float
    drafting_share: float = 1.0  # passes that drafted anything / all passes

    def width(self, k: int) -> float:
        """Tokens one pass scores on average when drafting up to k."""
        return 1.0 + self.drafting_share * min(k, self.server_k)


def acceptance(delta: Counters) -> Acceptance:
    if delta.drafts <= 0:
        raise TuneError("the server checked no drafts during the window: is speculation on, and did the workload "
                        "reach it? (its counters did not move)")
    server_k = delta.draft_tokens / delta.drafts
    passes = delta.drafts
    if delta.generated is not None and delta.generated - delta.accepted >= delta.drafts:
        passes = delta.generated - delta.accepted
    share = delta.drafts / passes
    if delta.per_pos:
        K = max(delta.per_pos) + 1
        return Acceptance([delta.per_pos.get(i, 0.0) / passes for i in range(K)], server_k, "per-position",
                          passes, share)
    K = max(1, round(server_k))
    mean = delta.accepted / delta.drafts  # accepted per drafting pass = r + r^2 + ... + r^K
    lo, hi = 0.0, 1.0
    for _ in range(60):
        r = (lo + hi) / 2
        lo, hi = (r, hi) if sum(r ** i for i in range(1, K + 1)) < mean else (lo, r)
    r = (lo + hi) / 2
    return Acceptance([share * r ** i for i in range(1, K + 1)], server_k, "i.i.d. fit", passes, share)


def load_cost_curve(path: Path) -> tuple[dict[int, float], float | None]:
    """(verify seconds by tokens, draft seconds per token or None) from our tune's --json output or a
    {"verify_s": {...}, "draft_token_s": ...} file."""
    try:
        data = json.loads(Path(path).read_text())
        verify = data.get("verify_cost_s") or data["verify_s"]
        curve = {int(w): float(s) for w, s in verify.items()}
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
        raise TuneError(f"--cost-curve {path}: expected a `specdecode tune --json` output or "
                        f'{{"verify_s": {{"1": seconds, ...}}, "draft_token_s": seconds}} ({exc})') from None
    if 1 not in curve:
        raise TuneError(f"--cost-curve {path}: the curve needs the one-token pass (width 1)")
    draft = data.get("draft_token_s")
    return curve, None if draft is None else float(draft)


def recommend(acc: Acceptance, verify: dict[int, float], draft_token_s: float, levels: list[int]) -> list[dict]:
    """Per concurrency level: the best k (0: do not speculate), its predicted speedup, every k's."""
    curve = CostCurve(verify)
    K = len(acc.accepted_at)
    out = []
    for c in levels:
        tokens = lambda k: c * (1.0 + sum(acc.accepted_at[:k]))  # noqa: E731
        cost = lambda k: curve(c * acc.width(k)) + k * acc.drafting_share * c * draft_token_s  # noqa: E731
        plain = tokens(0) / cost(0)
        k, rate = best_k(tokens, cost, K)
        out.append({"concurrency": c, "k": k, "speedup": rate / plain,
                    "by_k": {j: (tokens(j) / cost(j)) / plain for j in range(K + 1)}})
    return out


def version_of(base: str) -> str | None:
    import httpx

    try:
        response = httpx.get(f"{base}/version", timeout=5)
        return str(response.json().get("version")) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def flag(engine: str | None, version: str | None, k: int) -> str:
    """The server option that sets k, in the form this engine (and version, where it changed) takes."""
    if engine == "vllm":
        major_minor = tuple(int(x) for x in re.findall(r"\d+", version or "")[:2]) or (1, 0)
        if major_minor < (0, 7):  # before --speculative-config existed
            return f"--num-speculative-tokens {k}"
        return f"--speculative-config '{json.dumps({'num_speculative_tokens': k})}' (keep your method and model keys)"
    if engine == "sglang":
        return f"--speculative-num-steps {k} --speculative-num-draft-tokens {k + 1}"
    if engine == "llamacpp":
        # llama-server renamed it; a build whose --help lists neither predates speculation in the server.
        # It bounds a draft model's drafts; the n-gram cache's bound is fixed in llama.cpp's source
        # (8 in the build `make llama-server` makes), so no flag sets k for it.
        return (f"--spec-draft-n-max {k} (builds before the rename: --draft-max {k}; with --spec-type ngram-cache "
                f"no option sets it)")
    if engine == "specdecode":
        return f"specdecode serve --k {k} (or per request: \"speculative\": {{\"k\": {k}}})"
    return f"k = {k} (unknown engine: set its number of speculative tokens)"
