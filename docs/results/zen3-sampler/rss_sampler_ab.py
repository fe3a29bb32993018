"""Does sampling the process's RSS every 5 ms from a Python thread slow a llama.cpp generation in
the same process? The same greedy 48-token generation (our engine, plain, llama.cpp Q4_0 target)
with and without such a thread running, in alternating rounds; median decode ms a token.
Run: .venv/bin/python docs/results/zen3-sampler/rss_sampler_ab.py"""

import statistics
import threading

import psutil

from specdecode import SamplingParams, SpeculativeGenerator

ROUNDS = 6
PROMPT = "Write a Python function that merges two sorted lists into one sorted list, with a docstring."


def sampler(stop: threading.Event) -> None:
    proc = psutil.Process()
    while not stop.is_set():
        proc.memory_info()
        stop.wait(0.005)


def decode_ms(gen, with_thread: bool) -> float:
    stop = threading.Event()
    thread = threading.Thread(target=sampler, args=(stop,), daemon=True)
    if with_thread:
        thread.start()
    stats = gen.generate(PROMPT, SamplingParams(max_new_tokens=48, ignore_eos=True), k=0, proposer="none").stats
    stop.set()
    if with_thread:
        thread.join()
    return 1000 / stats["decode_tokens_per_s"]


def main():
    gen = SpeculativeGenerator.from_pretrained(target="llamacpp:default@q4_0", draft=None, proposer="none")
    gen.generate("Hi", SamplingParams(max_new_tokens=4), k=0, proposer="none")
    found = {False: [], True: []}
    for r in range(ROUNDS):
        for with_thread in ((False, True) if r % 2 == 0 else (True, False)):
            found[with_thread].append(decode_ms(gen, with_thread))
    for with_thread, values in found.items():
        label = "with a 5 ms RSS sampler thread" if with_thread else "alone"
        print(f"{label:32s} {statistics.median(values):.1f} ms a token (rounds {min(values):.1f}-{max(values):.1f})")


if __name__ == "__main__":
    main()
