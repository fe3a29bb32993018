"""How fast this machine's llama.cpp build runs our GGUF models: prefill, one-token decode, and a
5-token pass (what a k=4 verify costs), through the backend's own runner.

    python scripts/llamacpp_speed.py [SPEC ...]     (default: llamacpp:default@q4_0 llamacpp:default)

Prints the build's CPU features first: the kernels llama.cpp uses are chosen when it is compiled
(see the Makefile). Best of 2 repeats; after a 700-token prompt.
"""

import sys
import time

import llama_cpp

from specdecode.models.loader import load

PROMPT = 700


def main(specs: list[str]) -> None:
    print(llama_cpp.llama_print_system_info().decode().strip())
    for spec in specs:
        role = "draft" if "@" in spec else "target"
        runner, _ = load(spec if spec.startswith("llamacpp:") else f"llamacpp:{spec}", role, "auto", max_rows=1)
        results = []
        for _ in range(2):
            t = time.perf_counter()
            runner.add_rows(list(range(1000, 1000 + PROMPT)))
            prefill = time.perf_counter() - t
            t = time.perf_counter()
            for i in range(30):
                runner.forward([[2000 + i]], last_only=True)
            decode = (time.perf_counter() - t) / 30
            t = time.perf_counter()
            for _ in range(10):
                runner.forward([list(range(3000, 3005))])
                runner.rollback([5])
            five = (time.perf_counter() - t) / 10
            runner.remove_rows([0])
            results.append((prefill, decode, five))
        prefill, decode, five = min(results)
        print(f"{spec}: prefill {PROMPT} tokens {prefill:.2f} s ({PROMPT / prefill:.0f} tokens/s), "
              f"decode {decode * 1000:.1f} ms/token, 5-token pass {five * 1000:.1f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["llamacpp:default@q4_0", "llamacpp:default"])
