"""The standard sampler's draw over one vocabulary-wide row: the exponential race it used
(argmax(p / E), E = -log of float64 uniforms, one per token) against inverting the float64 CDF with
one uniform (sampling/params.sample_from now), interleaved rounds, median ms per row.
Usage: python sampler_cdf_ab.py [ROUNDS]"""

import statistics
import sys
import time

import torch

from specdecode.sampling.params import race_noise, sample_from


def race(probs, generator):
    return (probs.double() / race_noise(probs.shape, generator, probs.device)).argmax(-1)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(1, 151_936) * 3, -1)
    gen = torch.Generator().manual_seed(1)
    times = {"race": [], "cdf": []}
    for _ in range(rounds):
        for name, fn in (("race", race), ("cdf", sample_from)):
            start = time.perf_counter()
            for _ in range(50):
                fn(probs, gen)
            times[name].append((time.perf_counter() - start) / 50 * 1000)
    print({name: round(statistics.median(t), 3) for name, t in times.items()}, "ms per row,",
          torch.get_num_threads(), "threads")


if __name__ == "__main__":
    main()
