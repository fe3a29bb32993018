"""Prometheus metrics, named like vLLM's (prefix `specdecode:` instead of `vllm:`) so that existing
dashboards and `bench --endpoint` read them unchanged."""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

PREFIX = "specdecode:"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)


class ServerMetrics:
    def __init__(self, model_name: str):
        prometheus_client.disable_created_metrics()  # as vLLM: no *_created series beside each counter
        self.registry = CollectorRegistry()
        r, m = self.registry, {"model_name": model_name}
        self.labels = m
        self.running = Gauge(PREFIX + "num_requests_running", "Requests in the batch", ["model_name"], registry=r)
        self.waiting = Gauge(PREFIX + "num_requests_waiting", "Requests queued for a slot", ["model_name"], registry=r)
        self.k_cap = Gauge(PREFIX + "spec_decode_k_cap", "The load policy's cap on k in the last step (0 = "
                           "speculation off)", ["model_name"], registry=r)
        self.finished = Counter(PREFIX + "request_success", "Finished requests by reason (stop, length, abort, "
                                "error)", ["model_name", "finished_reason"], registry=r)
        self.rejected = Counter(PREFIX + "request_rejected", "Requests refused before running (invalid, "
                                "queue_full, shutting_down)", ["model_name", "reason"], registry=r)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens processed", ["model_name"], registry=r)
        self.generation_tokens = Counter(PREFIX + "generation_tokens", "Tokens generated", ["model_name"],
                                         registry=r)
        self.e2e = Histogram(PREFIX + "e2e_request_latency_seconds", "Request latency", ["model_name"],
                             buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Time to first token", ["model_name"],
                              buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram(PREFIX + "inter_token_latency_seconds", "Latency per generated token (a step that "
                             "emits n tokens counts n tokens of gap/n)", ["model_name"], buckets=ITL_BUCKETS,
                             registry=r)
        self.num_drafts = Counter(PREFIX + "spec_decode_num_drafts", "Verification steps that checked drafts",
                                  ["model_name"], registry=r)
        self.num_draft_tokens = Counter(PREFIX + "spec_decode_num_draft_tokens", "Draft tokens proposed",
                                        ["model_name"], registry=r)
        self.num_accepted_tokens = Counter(PREFIX + "spec_decode_num_accepted_tokens", "Draft tokens accepted",
                                           ["model_name"], registry=r)
        self.accepted_per_pos = Counter(PREFIX + "spec_decode_num_accepted_tokens_per_pos", "Draft tokens "
                                        "accepted at each position", ["model_name", "position"], registry=r)

    def step(self, drafted: int, accepted: int, tokens: int, gap_s: float, first: bool) -> None:
        """One verified step of one request."""
        m = self.labels
        if drafted:
            self.num_drafts.labels(**m).inc()
            self.num_draft_tokens.labels(**m).inc(drafted)
            self.num_accepted_tokens.labels(**m).inc(accepted)
            for pos in range(accepted):
                self.accepted_per_pos.labels(position=str(pos), **m).inc()
        if tokens:
            self.generation_tokens.labels(**m).inc(tokens)
            if first:
                self.ttft.labels(**m).observe(gap_s)
            # As in metrics.itl_per_token: the tokens of a step share its gap; the first token of a
            # request is the TTFT, not an inter-token latency.
            for _ in range(tokens - 1 if first else tokens):
                self.itl.labels(**m).observe(gap_s / tokens)

    def finish(self, reason: str, latency_s: float) -> None:
        self.finished.labels(finished_reason=reason, **self.labels).inc()
        self.e2e.labels(**self.labels).observe(latency_s)

    def reject(self, reason: str) -> None:
        self.rejected.labels(reason=reason, **self.labels).inc()

    def watch_suffix(self, proposer) -> None:
        """Export the suffix proposer's lookups, hits (in the request itself, in the memory of
        earlier outputs) and memory size; hit rate = hits / lookups."""
        self.registry.register(_SuffixCollector(proposer, self.labels))

    def watch_prefix_cache(self, cache) -> None:
        """Export the target's prefix cache as vLLM does: prompt tokens looked up and found (the hit
        rate is hits / queries), and the tokens it holds."""
        self.registry.register(_PrefixCacheCollector(cache, self.labels))


class _PrefixCacheCollector:
    def __init__(self, cache, labels: dict):
        self.cache, self.labels = cache, labels

    def collect(self):
        names, values = list(self.labels), list(self.labels.values())
        for name, value, doc in (
                ("prefix_cache_queries", self.cache.queried_tokens, "Prompt tokens looked up in the prefix cache"),
                ("prefix_cache_hits", self.cache.reused_tokens, "Prompt tokens whose KV came from the prefix cache")):
            family = CounterMetricFamily(PREFIX + name, doc, labels=names)
            family.add_metric(values, value)
            yield family
        size = GaugeMetricFamily(PREFIX + "prefix_cache_tokens", "Tokens held in the target's prefix cache",
                                 labels=names)
        size.add_metric(values, self.cache.tokens)
        yield size


class _SuffixCollector:
    def __init__(self, proposer, labels: dict):
        self.proposer, self.labels = proposer, labels

    def collect(self):
        names = list(self.labels)
        values = list(self.labels.values())
        counters = self.proposer.counters
        for key, doc in (("lookups", "Suffix proposer lookups (passes that could draft)"),
                         ("memory_hits", "Suffix lookups answered from the memory of earlier outputs"),
                         ("own_hits", "Suffix lookups answered from the request's own prompt and output")):
            family = CounterMetricFamily(PREFIX + "suffix_" + key, doc, labels=names)
            family.add_metric(values, counters[key])
            yield family
        size = GaugeMetricFamily(PREFIX + "suffix_memory_tokens", "Tokens held in the suffix memories",
                                 labels=names)
        size.add_metric(values, self.proposer.memory_size)
        yield size
