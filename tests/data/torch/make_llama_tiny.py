import torch, sys
from transformers import LlamaConfig, LlamaForCausalLM
h, L, dyn = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "dyn"
cfg = LlamaConfig(hidden_size=h, intermediate_size=2*h, num_hidden_layers=L, num_attention_heads=4, num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)
torch.manual_seed(0)
m = LlamaForCausalLM(cfg).eval()
class W(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m=m
    def forward(s, ids, mask): return s.m(input_ids=ids, attention_mask=mask, use_cache=False).logits
ids = torch.randint(0, 64, (1, 8)); mask = torch.ones(1, 8, dtype=torch.int64)
kw = dict(dynamic_axes={"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}}) if dyn else {}
torch.onnx.export(W(m), (ids, mask), sys.argv[4], dynamo=False, opset_version=17, input_names=["input_ids", "attention_mask"], output_names=["logits"], **kw)
