"""The sampler's cost per vocabulary-wide row, old rule against new, in interleaved rounds (median):
- standard sampler: exponential race with torch's exponential_ against -log of float64 uniforms;
- drafter-invariant sampler: Gumbel-max with log p + (-log(-log u)) against the race p / (-log u)
  on the same keyed uniforms, which must pick the same token.
Run: .venv/bin/python docs/results/zen3-sampler/sampler_ab.py"""

import statistics
import time

import torch

from specdecode.sampling.params import sample_from
from specdecode.verification.invariant import exponentials, position_seed, race_argmax

V, ROUNDS, CALLS = 151_936, 7, 40


def old_sample(p, gen):
    noise = torch.empty(p.shape, dtype=torch.float64).exponential_(generator=gen)
    return (p.double() / noise.clamp_(min=torch.finfo(torch.float64).tiny)).argmax(-1)


def old_gumbel_token(p, seed, position):
    gen = torch.Generator().manual_seed(position_seed(seed, position))
    u = torch.rand(V, dtype=torch.float64, generator=gen).clamp_(min=torch.finfo(torch.float64).tiny)
    return int((torch.log(p.double()) - torch.log(-torch.log(u))).argmax())


def new_race_token(p, seed, position):
    return race_argmax(p, exponentials(seed, position, V))


def ms(fn):
    start = time.perf_counter()
    for i in range(CALLS):
        fn(i)
    return (time.perf_counter() - start) / CALLS * 1e3


def main():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(V) * 3, -1)
    gen = torch.Generator().manual_seed(1)
    same = sum(old_gumbel_token(p, s, t) == new_race_token(p, s, t) for s in range(20) for t in range(50))
    times = {name: [] for name in ("standard old", "standard new", "invariant old", "invariant new")}
    for _ in range(ROUNDS):
        times["standard old"].append(ms(lambda i: old_sample(p, gen)))
        times["standard new"].append(ms(lambda i: sample_from(p, gen)))
        times["invariant old"].append(ms(lambda i: old_gumbel_token(p, 3, i)))
        times["invariant new"].append(ms(lambda i: new_race_token(p, 3, i)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, V = {V}, {ROUNDS} interleaved rounds of {CALLS} calls")
    for name, values in times.items():
        print(f"{name:14s} {statistics.median(values):.2f} ms per row (rounds {min(values):.2f}-{max(values):.2f})")
    print(f"invariant: old and new pick the same token at {same} of 1000 (seed, position) pairs")


if __name__ == "__main__":
    main()
