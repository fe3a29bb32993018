"""Logits of the Q4_0 target (Q6_K output layer) for 5 positions after 100 tokens, with whatever llama.cpp
library is installed; saved to the path given, to compare two libraries run one after the other."""
import random
import sys

import numpy as np

from specdecode.models.backends import llamacpp
from specdecode.models.registry import resolve

r = llamacpp.LlamaCppRunner.load(llamacpp.requantized(resolve("default", "target").gguf, "q4_0"), n_ctx=512)
rng = random.Random(0)
prefix = [rng.randrange(1000, 30000) for _ in range(100)]
tokens = [rng.randrange(1000, 30000) for _ in range(5)]
r.add_rows(prefix[:-1])
wide = r.forward([[prefix[-1], *tokens[:-1]]])[0].float().numpy()
np.save(sys.argv[1], wide)
print(llamacpp.system_info())
