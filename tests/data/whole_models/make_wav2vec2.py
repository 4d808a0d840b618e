"""Make the tiny Wav2Vec2 exports validation's input sizing is tested on (needs torch and
transformers; the tests do not).

    PYTHONPATH=. python tests/data/whole_models/make_wav2vec2.py

transformers' ``Wav2Vec2Model`` from a tiny random config (hidden size 16, one layer, three
feature-extractor convolutions: kernel 10 stride 5, then kernel 3 stride 2 twice), exported with
the TorchScript exporter (``dynamo=False``) at opset 17, batch and length dynamic: a generated
input of 4 samples is too short for its convolutions.

* ``wav2vec2_ts17``: ``input_values`` only (group norm, as wav2vec2-base).
* ``wav2vec2_mask_ts17``: ``input_values`` and ``attention_mask`` sharing ``length`` (layer norm,
  as wav2vec2-large-lv60); the mask's conversion to frames is a ScatterND (``index_put``).
* ``wav2vec2_dynamo18``: the first, with the dynamo exporter at opset 18 (``length`` from 400).

Each ``NAME.onnx`` comes with ``NAME.npz``: the inputs (``in_<input name>``, 400 samples) and
PyTorch's own outputs (``out_<output name>``) computed in eager mode.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import Wav2Vec2Config, Wav2Vec2Model

HERE = Path(__file__).resolve().parent
warnings.simplefilter("ignore")


class LastHiddenState(torch.nn.Module):
    def __init__(self, model: Wav2Vec2Model):
        super().__init__()
        self.model = model

    def forward(self, input_values, attention_mask=None):
        return self.model(input_values, attention_mask=attention_mask).last_hidden_state


def tiny(stable_layer_norm: bool) -> Wav2Vec2Model:
    torch.manual_seed(0)
    config = Wav2Vec2Config(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        conv_dim=(8, 8, 8), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
        num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2, vocab_size=8,
        feat_extract_norm="layer" if stable_layer_norm else "group",
        do_stable_layer_norm=stable_layer_norm)
    return Wav2Vec2Model(config).eval()


def export(name: str, stable_layer_norm: bool, with_mask: bool, dynamo: bool = False) -> None:
    module = LastHiddenState(tiny(stable_layer_norm)).eval()
    generator = torch.Generator().manual_seed(1)
    audio = torch.randn(1, 400, generator=generator)
    args = (audio, torch.ones(1, 400, dtype=torch.int64)) if with_mask else (audio,)
    names = ["input_values", "attention_mask"][: len(args)]
    if dynamo:
        dims = {0: torch.export.Dim("batch", max=64),
                1: torch.export.Dim("length", min=400, max=100_000)}
        program = torch.onnx.export(module, args, dynamo=True, opset_version=18,
                                    dynamic_shapes={n: dims for n in names})
        program.save(str(HERE / f"{name}.onnx"))
    else:
        axes = {n: {0: "batch", 1: "length"} for n in names}
        torch.onnx.export(module, args, str(HERE / f"{name}.onnx"), input_names=names,
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes=axes | {"last_hidden_state": {0: "batch", 1: "frames"}})
    with torch.no_grad():
        expected = module(*args)
    np.savez(HERE / f"{name}.npz", **{f"in_{n}": a.numpy() for n, a in zip(names, args)},
             out_last_hidden_state=expected.numpy())


if __name__ == "__main__":
    export("wav2vec2_ts17", stable_layer_norm=False, with_mask=False)
    export("wav2vec2_mask_ts17", stable_layer_norm=True, with_mask=True)
    export("wav2vec2_dynamo18", stable_layer_norm=False, with_mask=False, dynamo=True)
