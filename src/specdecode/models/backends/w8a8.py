"""`--dtype w8a8`: int8 linear layers whose rows never depend on each other.

PyTorch's dynamically quantised int8 linear (`--dtype int8`) picks one activation scale for the
whole input of a pass, so in a verify pass every token's logits move with the other tokens scored
beside it: a target in that dtype gives slightly different p to the same context in a 1-token and
a 5-token pass, and to one row depending on the rows batched with it. Here every token (row) gets
its own scale, weights one per output channel, and the product is accumulated in int32, which is
exact: a row's output is a function of that row alone, bit for bit, whatever else is in the pass.
A target in w8a8 therefore scores a token the same in plain decoding, in a verify pass and in any
batch, which is what exact speculative decoding needs of it, at int8's memory traffic.

Per-token activations are also far more accurate than one scale per pass, where the token with the
largest activations sets the step size for all the others (the agreement of each with float32 is
measured in docs/backends.md). The cost: `torch._int_mm` is slower at small widths than fbgemm's
per-pass kernel.
"""

from __future__ import annotations

import torch
from torch import nn


class W8A8Linear(nn.Module):
    """y = (round(x / s_x) @ W8^T) * s_x * s_w (+ bias): s_x per row of x, s_w per output channel."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # Stored [in, out] so that _int_mm reads it as its second operand without a transpose copy.
        self.register_buffer("weight_t", torch.round(weight / scale[:, None]).clamp(-127, 127)
                             .to(torch.int8).t().contiguous())
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, self.in_features).float()
        scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        quantised = torch.round(rows / scale).to(torch.int8)
        out = torch._int_mm(quantised, self.weight_t).float() * scale * self.weight_scale
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*shape[:-1], self.out_features).to(x.dtype)


def quantise(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear of a float32 model (LM head included) by a W8A8Linear, in place."""
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear):
            setattr(model, name, W8A8Linear(child))
        else:
            quantise(child)
    return model
