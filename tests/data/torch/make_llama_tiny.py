"""Make ``llama_tiny_ts17.onnx``: a transformers Llama from a tiny random config (hidden size 32,
one layer, 4 heads, 2 key/value heads, vocabulary 64), exported by TorchScript at opset 17 with a
dynamic batch and sequence length (needs torch and transformers; tests do not).

    python tests/data/torch/make_llama_tiny.py

Inputs ``input_ids`` and ``attention_mask`` [batch, sequence] (int64), output ``logits``; the
inputs and PyTorch's logits go to ``llama_tiny_ts17.npz`` as for ``make.py``. Moving it
to opset 13 only drops ``allowzero=0`` from its Reshapes, yet onnxruntime 1.32 fuses the attention
scores' MatMul with its two scales (FusedMatMul) at opset 17 and not at 13: the logits differ in
their last bits (tests/test_validation_status.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

HERE = Path(__file__).resolve().parent
warnings.simplefilter("ignore")


class Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def main() -> None:
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                         max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 64, (1, 8))
    mask = torch.ones(1, 8, dtype=torch.int64)
    dynamic = {0: "batch", 1: "sequence"}
    torch.onnx.export(Logits(model), (ids, mask), HERE / "llama_tiny_ts17.onnx", dynamo=False,
                      opset_version=17, input_names=["input_ids", "attention_mask"],
                      output_names=["logits"],
                      dynamic_axes={"input_ids": dynamic, "attention_mask": dynamic})
    with torch.no_grad():
        logits = Logits(model)(ids, mask)
    np.savez(HERE / "llama_tiny_ts17.npz", in_input_ids=ids.numpy(), in_attention_mask=mask.numpy(),
             out_logits=logits.numpy())


if __name__ == "__main__":
    main()
