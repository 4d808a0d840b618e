"""Make ``sam_tiny_ts11.onnx`` and ``sam_tiny_ts17.onnx``: segment_anything's own ONNX export
(``segment_anything.utils.onnx.SamOnnxModel``: the prompt encoder and mask decoder over a given
image embedding, then the masks resized to the original image's size) around a tiny random SAM
(image size 64, embedding dim 16, one two-way transformer layer), exported by TorchScript at opsets
11 and 17 as segment_anything's ``scripts/export_onnx_model.py`` does (dynamic ``num_points``).
Needs torch and segment_anything; tests do not.

    python tests/data/torch_sam/make_sam_tiny.py

The inputs and PyTorch's outputs go to ``sam_tiny_ts<opset>.npz`` (``in_<name>``, ``out_<name>``).
``orig_im_size`` (float, [2]) becomes the size of a Resize: the original runs only on a positive
size, which validation must generate without ``--inputs``.
"""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path

import numpy as np
import torch
from segment_anything.modeling import (
    ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer,
)
from segment_anything.utils.onnx import SamOnnxModel

HERE = Path(__file__).resolve().parent
warnings.simplefilter("ignore")
IMAGE, EMBED, PATCH = 64, 16, 16  # image size, prompt embedding dim, patch size
GRID = IMAGE // PATCH  # the image embedding's side


def tiny_sam() -> Sam:
    encoder = ImageEncoderViT(
        img_size=IMAGE, patch_size=PATCH, in_chans=3, embed_dim=16, depth=1, num_heads=1,
        mlp_ratio=2.0, out_chans=EMBED, qkv_bias=True,
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), use_rel_pos=False, window_size=0,
        global_attn_indexes=())
    prompt = PromptEncoder(embed_dim=EMBED, image_embedding_size=(GRID, GRID),
                           input_image_size=(IMAGE, IMAGE), mask_in_chans=4)
    decoder = MaskDecoder(
        num_multimask_outputs=3,
        transformer=TwoWayTransformer(depth=1, embedding_dim=EMBED, mlp_dim=32, num_heads=2),
        transformer_dim=EMBED, iou_head_depth=2, iou_head_hidden_dim=16)
    return Sam(image_encoder=encoder, prompt_encoder=prompt, mask_decoder=decoder).eval()


def feeds() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return {
        "image_embeddings": torch.randn(1, EMBED, GRID, GRID, generator=generator),
        "point_coords": torch.randint(0, IMAGE, (1, 5, 2), generator=generator).float(),
        "point_labels": torch.tensor([[1.0, 0.0, 2.0, 3.0, -1.0]]),
        "mask_input": torch.randn(1, 1, 4 * GRID, 4 * GRID, generator=generator),
        "has_mask_input": torch.tensor([1.0]),
        "orig_im_size": torch.tensor([48.0, 80.0]),
    }


def main() -> None:
    torch.manual_seed(0)
    onnx_model = SamOnnxModel(tiny_sam(), return_single_mask=True).eval()
    inputs = feeds()
    names = list(inputs)
    outputs = ["masks", "iou_predictions", "low_res_masks"]
    with torch.no_grad():
        expected = onnx_model(*inputs.values())
    for opset in (11, 17):
        torch.onnx.export(onnx_model, tuple(inputs.values()), HERE / f"sam_tiny_ts{opset}.onnx",
                          dynamo=False, opset_version=opset, input_names=names,
                          output_names=outputs, do_constant_folding=True,
                          dynamic_axes={"point_coords": {1: "num_points"},
                                        "point_labels": {1: "num_points"}})
        np.savez(HERE / f"sam_tiny_ts{opset}.npz",
                 **{f"in_{k}": v.numpy() for k, v in inputs.items()},
                 **{f"out_{k}": v.numpy() for k, v in zip(outputs, expected)})


if __name__ == "__main__":
    main()
