"""Make the whole-model corpus that tests/test_whole_model_exports.py reads (needs torch,
torchvision, transformers and onnxscript; the tests need none of them).

    python3 -m venv /tmp/venv-corpus && . /tmp/venv-corpus/bin/activate
    pip install torch==2.14.1 torchvision==0.29.1 transformers onnx onnxscript
    python tests/data/whole_models/make.py      # every model; or name some: make.py bert_ts11_dyn

Whole models as users export them: transformers architectures from tiny random configs (BERT,
GPT-2, Llama, BART, CLIP text+vision), torchvision architectures at reduced width (SqueezeNet 1.1,
MobileNetV3-small, ShuffleNetV2, a ResNet of BasicBlocks, a VisionTransformer), layers that
carry scatters (a GNN mean aggregation with ``scatter_add``, a point-cloud max pool with
``scatter_reduce(amax)``, a multi-hot label-smoothing head with ``index_put``, a classifier with a
constant class bias made by ``scatter``) and an antialiased-resize stem (no exact form below
opset 18), each exported by TorchScript (``dynamo=False``, opsets 10-17: at 10 a scatter is the deprecated
``Scatter``, below 13 it writes unnamed ``Constant`` tensors) and by dynamo (``dynamo=True``),
with static or dynamic shapes. Weights are random (seeded), sizes tiny, so that the corpus stays
small.

Each ``NAME.onnx`` comes with ``NAME.npz``: seeded inputs (``in_<input name>``) and PyTorch's own
outputs on them in eager mode (``out_<output name>``). A dynamic export is traced on one size and
its ``.npz`` holds inputs of another (batch 3, sequence 5), so the tests run it where the trace
did not. Names say ``<architecture>_<ts|dynamo><opset>_<static|dyn>``. ``manifest.json`` lists
them with the versions that made them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
warnings.simplefilter("ignore")

# (batch, sequence) of the export's trace, and of a dynamic export's .npz inputs
TRACE, OTHER = (2, 8), (3, 5)
VOCAB, IMAGE = 99, 32


@dataclasses.dataclass
class Arch:
    """A module and how to make inputs for it: ``inputs(batch, seq, seed)`` -> name -> tensor;
    ``dynamic``: input name -> {axis: "batch" | "seq"}; ``fold_constants``: whether the exporter
    folds constants (TorchScript's ``do_constant_folding``, dynamo's ``optimize``)."""

    make: Callable[[], nn.Module]
    inputs: Callable[[int, int, int], dict[str, torch.Tensor]]
    dynamic: dict[str, dict[int, str]]
    outputs: list[str]
    fold_constants: bool = True


# -- transformers ---------------------------------------------------------------------------------

class TextModel(nn.Module):
    """A transformers model's hidden states (and pooled output where it has one) as a tuple."""

    def __init__(self, model: nn.Module, keys: list[str]):
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return tuple(out[k] for k in self.keys)


class BertLike(TextModel):
    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return tuple(out[k] for k in self.keys)


class Seq2Seq(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         decoder_input_ids=decoder_input_ids, use_cache=False)
        return out.last_hidden_state, out.encoder_last_hidden_state


class Clip(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, pixel_values):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         pixel_values=pixel_values)
        return out.logits_per_image, out.text_embeds, out.image_embeds


def _text_inputs(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[0, seq - 2:] = 0  # one padded row: the attention mask matters
    return {"input_ids": torch.randint(3, VOCAB, (batch, seq), generator=g),
            "attention_mask": mask}


def _hf(config_name: str, **config) -> nn.Module:
    import transformers

    torch.manual_seed(0)
    cfg = getattr(transformers, config_name)(**config)
    return transformers.AutoModel.from_config(cfg, attn_implementation="eager").eval()


_TEXT_DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
              vocab_size=VOCAB, max_position_embeddings=64)


def _bert():
    return BertLike(_hf("BertConfig", **_SMALL, type_vocab_size=2),
                    ["last_hidden_state", "pooler_output"])


def _gpt2():
    return TextModel(_hf("GPT2Config", n_embd=32, n_layer=2, n_head=2, n_inner=64,
                         vocab_size=VOCAB, n_positions=64, bos_token_id=1, eos_token_id=2),
                     ["last_hidden_state"])


def _llama():
    return TextModel(_hf("LlamaConfig", **_SMALL, num_key_value_heads=1), ["last_hidden_state"])


def _bart():
    return Seq2Seq(_hf("BartConfig", d_model=32, encoder_layers=1, decoder_layers=1,
                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                       decoder_ffn_dim=64, vocab_size=VOCAB, max_position_embeddings=64))


def _bart_inputs(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    inputs = _text_inputs(batch, seq, seed)
    g = torch.Generator().manual_seed(seed + 1)
    return inputs | {"decoder_input_ids": torch.randint(3, VOCAB, (batch, seq), generator=g)}


def _clip():
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                vocab_size=VOCAB, max_position_embeddings=64, projection_dim=16, bos_token_id=1,
                eos_token_id=2, pad_token_id=0)
    vision = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                  image_size=IMAGE, patch_size=8, projection_dim=16)
    import transformers

    torch.manual_seed(0)
    cfg = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    return Clip(transformers.CLIPModel(cfg).eval())


def _clip_inputs(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 2)
    return _text_inputs(batch, seq, seed) | {
        "pixel_values": torch.randn(batch, 3, IMAGE, IMAGE, generator=g)}


# -- torchvision ----------------------------------------------------------------------------------

def _images(size: int) -> Callable[[int, int, int], dict[str, torch.Tensor]]:
    def inputs(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {"images": torch.randn(batch, 3, size, size, generator=g)}

    return inputs


def _vision(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(0)
        model = build().eval()
        # BatchNorm statistics that are not 0/1, as a trained model has
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
        return model

    return make


def _squeezenet():
    from torchvision.models import squeezenet1_1

    return squeezenet1_1(num_classes=10)


def _mobilenet():
    from torchvision.models import mobilenet_v3_small

    return mobilenet_v3_small(num_classes=10, width_mult=0.25)


def _shufflenet():
    from torchvision.models.shufflenetv2 import ShuffleNetV2

    return ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 128], num_classes=10)


def _resnet():
    """torchvision's ResNet of BasicBlocks [1, 1, 1, 1] at an eighth of the width."""
    from torchvision.models.resnet import BasicBlock, ResNet

    class SmallResNet(ResNet):
        def __init__(self):
            super().__init__(BasicBlock, [1, 1, 1, 1], num_classes=10)
            self.inplanes = 8
            self.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.layer1 = self._make_layer(BasicBlock, 8, 1)
            self.layer2 = self._make_layer(BasicBlock, 16, 1, stride=2)
            self.layer3 = self._make_layer(BasicBlock, 32, 1, stride=2)
            self.layer4 = self._make_layer(BasicBlock, 64, 1, stride=2)
            self.fc = nn.Linear(64, 10)

    return SmallResNet()


def _vit():
    from torchvision.models import VisionTransformer

    return VisionTransformer(image_size=IMAGE, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=32, mlp_dim=64, num_classes=10)


# -- layers that carry scatters -------------------------------------------------------------------

FEATURES, NODES, EDGES = 8, 6, 20


class GnnMean(nn.Module):
    """A GraphSAGE-style layer: messages from the source nodes, summed into their destinations with
    ``scatter_add`` and divided by each node's in-degree (``scatter_add`` of ones), then a
    Linear."""

    def __init__(self):
        super().__init__()
        self.message = nn.Linear(FEATURES, FEATURES)
        self.update = nn.Linear(2 * FEATURES, FEATURES)

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        msg = torch.relu(self.message(x)).index_select(0, src)
        summed = torch.zeros_like(x).scatter_add(0, dst.unsqueeze(1).expand(-1, FEATURES), msg)
        ones = torch.ones_like(dst, dtype=x.dtype)
        degree = torch.zeros(x.shape[0], dtype=x.dtype).scatter_add(0, dst, ones)
        mean = summed / degree.clamp(min=1).unsqueeze(1)
        return self.update(torch.cat([x, mean], dim=1))


class PointMaxPool(nn.Module):
    """A point-cloud pooling layer: per-point features max-pooled into their voxels
    (``scatter_reduce(amax)`` onto zeros: the features are ReLUs), voxels that no point falls in
    left at zero."""

    def __init__(self):
        super().__init__()
        self.point = nn.Linear(3, FEATURES)

    def forward(self, points, voxel):
        feat = torch.relu(self.point(points))
        index = voxel.unsqueeze(1).expand(-1, FEATURES)
        pooled = torch.zeros(NODES, FEATURES).scatter_reduce(0, index, feat, "amax")
        # (elementwise: TorchScript's export of scatter_reduce hides the result's rank from
        # onnxruntime's shape inference, which then refuses a ReduceSum or Gemm on it)
        return pooled * torch.sigmoid(pooled)


class MultiHotSmoothing(nn.Module):
    """A multi-label head: logits, and a label-smoothed multi-hot target built with
    ``index_put_(accumulate=True)`` (a label given twice counts twice), its BCE per example."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(FEATURES, 10)

    def forward(self, x, rows, labels):
        logits = self.head(x)
        target = torch.zeros_like(logits)
        target.index_put_((rows, labels), torch.ones_like(labels, dtype=x.dtype), accumulate=True)
        smoothed = target * 0.9 + torch.full_like(logits, 0.01)
        capped = torch.minimum(smoothed, torch.ones_like(logits))
        # (binary cross-entropy with logits, written out: TorchScript has it from opset 12 only)
        loss = logits.clamp(min=0) - logits * capped + torch.log1p(torch.exp(-logits.abs()))
        return logits, loss.sum(dim=1)


class PriorHead(nn.Module):
    """A classifier whose logits get a fixed bias on a few known classes, built in forward with
    ``scatter`` of constants (a constant scatter, which ``fold`` folds)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(FEATURES, 10)

    def forward(self, x):
        classes = torch.tensor([[1, 3, 7]])
        bias = torch.zeros(1, 10).scatter(1, classes, torch.tensor([[0.5, -0.25, 1.0]]))
        return self.head(x) + bias


class AntialiasStem(nn.Module):
    """An image model's preprocessing and stem: an antialiased bilinear downscale (Resize with
    antialias=1, which exists from opset 18 only) then a convolution."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, images):
        small = nn.functional.interpolate(images, scale_factor=0.5, mode="bilinear",
                                          antialias=True)
        return torch.relu(self.conv(small)).mean(dim=(2, 3))


def _features(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(batch, FEATURES, generator=g)}


def _graph_inputs(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    nodes = NODES if batch == TRACE[0] else NODES + 3
    edges = torch.randint(0, nodes, (2, EDGES + batch), generator=g)
    edges[1, :3] = 0  # a repeated destination
    return {"x": torch.randn(nodes, FEATURES, generator=g), "edge_index": edges}


def _point_inputs(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    count = 4 * seq
    voxel = torch.randint(0, NODES - 1, (count,), generator=g)  # voxel NODES - 1 stays empty
    return {"points": torch.randn(count, 3, generator=g), "voxel": voxel}


def _label_inputs(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    rows = torch.arange(batch).repeat_interleave(2)
    labels = torch.randint(0, 10, (2 * batch,), generator=g)
    labels[1] = labels[0]  # a label given twice
    return {"x": torch.randn(batch, FEATURES, generator=g), "rows": rows, "labels": labels}


_IMAGES = {"images": {0: "batch"}}
ARCHS = {
    "bert": Arch(_bert, _text_inputs, _TEXT_DYNAMIC, ["last_hidden_state", "pooler_output"]),
    "gpt2": Arch(_gpt2, _text_inputs, _TEXT_DYNAMIC, ["last_hidden_state"]),
    "llama": Arch(_llama, _text_inputs, _TEXT_DYNAMIC, ["last_hidden_state"]),
    "bart": Arch(_bart, _bart_inputs, _TEXT_DYNAMIC | {"decoder_input_ids": {0: "batch", 1: "seq"}},
                 ["last_hidden_state", "encoder_last_hidden_state"]),
    "clip": Arch(_clip, _clip_inputs, _TEXT_DYNAMIC | {"pixel_values": {0: "batch"}},
                 ["logits_per_image", "text_embeds", "image_embeds"]),
    "squeezenet": Arch(_vision(_squeezenet), _images(64), _IMAGES, ["logits"]),
    "mobilenet": Arch(_vision(_mobilenet), _images(64), _IMAGES, ["logits"]),
    "shufflenet": Arch(_vision(_shufflenet), _images(64), _IMAGES, ["logits"]),
    "resnet": Arch(_vision(_resnet), _images(64), _IMAGES, ["logits"]),
    "vit": Arch(_vision(_vit), _images(IMAGE), _IMAGES, ["logits"]),
    "gnn_mean": Arch(GnnMean, _graph_inputs, {"x": {0: "nodes"}, "edge_index": {1: "edges"}},
                     ["h"]),
    "point_max_pool": Arch(PointMaxPool, _point_inputs, {"points": {0: "points"},
                                                         "voxel": {0: "points"}}, ["pooled"]),
    "multi_hot": Arch(MultiHotSmoothing, _label_inputs, {"x": {0: "batch"}, "rows": {0: "labels"},
                                                         "labels": {0: "labels"}},
                      ["logits", "loss"]),
    # (exported without the exporters' constant folding, which would fold the scatter itself;
    # dynamo only: TorchScript's tracer computes it at export whatever the option)
    "prior_head": Arch(PriorHead, _features, {"x": {0: "batch"}}, ["logits"],
                       fold_constants=False),
    "antialias_stem": Arch(AntialiasStem, _images(32), _IMAGES, ["features"]),
}

# (architecture, exporter, opset, dynamic); dynamo's opset None: the exporter's default
EXPORTS = [
    ("bert", "ts", 11, True), ("bert", "ts", 14, False), ("bert", "dynamo", 18, True),
    ("gpt2", "ts", 10, False), ("gpt2", "ts", 12, True), ("gpt2", "dynamo", None, False),
    ("llama", "ts", 13, True), ("llama", "ts", 17, False), ("llama", "dynamo", 18, True),
    ("bart", "ts", 15, False), ("bart", "dynamo", 18, True),
    ("clip", "ts", 17, True), ("clip", "dynamo", None, True),
    ("squeezenet", "ts", 11, False), ("squeezenet", "dynamo", 18, True),
    ("mobilenet", "ts", 12, True), ("mobilenet", "dynamo", None, False),
    ("shufflenet", "ts", 13, True), ("shufflenet", "dynamo", 18, False),
    ("resnet", "ts", 16, False), ("resnet", "dynamo", 18, True),
    ("vit", "ts", 17, True), ("vit", "dynamo", None, False),
    ("gnn_mean", "ts", 10, True), ("gnn_mean", "ts", 11, True),
    ("gnn_mean", "ts", 16, False), ("gnn_mean", "dynamo", 18, True),
    ("point_max_pool", "ts", 16, True), ("point_max_pool", "dynamo", 18, False),
    ("multi_hot", "ts", 11, False), ("multi_hot", "ts", 12, True),
    ("multi_hot", "dynamo", 18, True),
    ("prior_head", "dynamo", 18, True), ("prior_head", "dynamo", None, False),
    ("antialias_stem", "dynamo", None, False), ("antialias_stem", "dynamo", 18, True),
]


def export_name(arch: str, exporter: str, opset: int | None, dynamic: bool) -> str:
    return f"{arch}_{exporter}{opset or 'default'}_{'dyn' if dynamic else 'static'}"


def _dynamo_shapes(arch: Arch, names: list[str]) -> tuple:
    """Each dynamic axis free (torch.export infers which inputs share a size)."""
    from torch.export import Dim

    return tuple({axis: Dim.DYNAMIC for axis in arch.dynamic.get(n, {})} or None for n in names)


def export(arch_name: str, exporter: str, opset: int | None, dynamic: bool) -> dict:
    arch = ARCHS[arch_name]
    name = export_name(arch_name, exporter, opset, dynamic)
    path = HERE / f"{name}.onnx"
    torch.manual_seed(0)  # (the weights of a model do not depend on what was made before it)
    module = arch.make().eval()
    example = arch.inputs(*TRACE, 0)
    names, args = list(example), tuple(example.values())
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    # (not under no_grad: torchvision's attention would take its fused fast path, which TorchScript
    # cannot export)
    with quiet[0], quiet[1]:
        if exporter == "ts":
            torch.onnx.export(module, args, path, dynamo=False, opset_version=opset,
                              input_names=names, output_names=arch.outputs,
                              dynamic_axes=arch.dynamic if dynamic else None,
                              do_constant_folding=arch.fold_constants)
        else:
            torch.onnx.export(module, args, path, dynamo=True, opset_version=opset,
                              input_names=names, output_names=arch.outputs, external_data=False,
                              dynamic_shapes=_dynamo_shapes(arch, names) if dynamic else None,
                              optimize=arch.fold_constants)
    feeds = arch.inputs(*(OTHER if dynamic else TRACE), 1)
    with torch.no_grad():
        outputs = module(*feeds.values())
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    np.savez(HERE / f"{name}.npz", **{f"in_{k}": v.numpy() for k, v in feeds.items()},
             **{f"out_{k}": v.numpy() for k, v in zip(arch.outputs, outputs)})
    model = onnx.load(path)
    opset_written = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    ops = sorted({n.op_type for n in model.graph.node})
    print(f"{name}: opset {opset_written}, {path.stat().st_size} bytes, {len(model.graph.node)} "
          f"nodes, {len(model.functions)} functions", flush=True)
    return {"name": name, "architecture": arch_name, "exporter": exporter, "opset": opset_written,
            "dynamic": dynamic, "ops": ops}


def main(selected: list[str]) -> None:
    import transformers

    entries, failed = {}, []
    manifest = HERE / "manifest.json"
    if selected and manifest.is_file():
        entries = {e["name"]: e for e in json.loads(manifest.read_text())["models"]}
    for arch, exporter, opset, dynamic in EXPORTS:
        if selected and export_name(arch, exporter, opset, dynamic) not in selected:
            continue
        try:
            entry = export(arch, exporter, opset, dynamic)
        except Exception as e:  # (the others are still made; the exit code says it failed)
            failed.append(f"{export_name(arch, exporter, opset, dynamic)}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}")
            continue
        entries[entry["name"]] = entry
    import torchvision

    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                "transformers": transformers.__version__, "onnx": onnx.__version__}
    order = [export_name(*e) for e in EXPORTS]
    manifest.write_text(json.dumps(
        {"made_by": "make.py", "versions": versions,
         "models": [entries[n] for n in order if n in entries]}, indent=1) + "\n")
    for failure in failed:
        print(f"FAILED {failure}", file=sys.stderr)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
