"""
synth_adapter.py — a synthetic PEFT LoRA adapter for SmolLM2-135M-Instruct
(the default model; tests/golden/lora_fixtures only fit the tiny model):
adapter_config.json + adapter_model.safetensors (F32) targeting q_proj and
v_proj of every layer, with seeded random A and B large enough that greedy
output differs from the base model and between seeds.
"""
import json
import struct

import numpy as np

SMOLLM2_SHAPE = {"layers": 30, "hidden": 576, "q_out": 576, "v_out": 192}


def smollm2_adapter(seed, rank=4, scale=0.08, shape=SMOLLM2_SHAPE):
    """(config bytes, safetensors bytes) of a rank-`rank` q,v adapter."""
    rng = np.random.default_rng(seed)
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": rank, "lora_dropout": 0.0,
           "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False,
           "use_rslora": False, "use_dora": False, "base_model_name_or_path": "SmolLM2-135M-Instruct"}
    tensors = {}
    for layer in range(shape["layers"]):
        for mod, out in (("q_proj", shape["q_out"]), ("v_proj", shape["v_out"])):
            p = f"base_model.model.model.layers.{layer}.self_attn.{mod}"
            tensors[p + ".lora_A.weight"] = rng.normal(0, scale, (rank, shape["hidden"])).astype(np.float32)
            tensors[p + ".lora_B.weight"] = rng.normal(0, scale, (out, rank)).astype(np.float32)
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = t.tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return json.dumps(cfg).encode(), struct.pack("<Q", len(h)) + h + b"".join(blobs)


def write_adapter(directory, seed, **kw):
    import os
    os.makedirs(directory, exist_ok=True)
    cfg, w = smollm2_adapter(seed, **kw)
    with open(os.path.join(directory, "adapter_config.json"), "wb") as f:
        f.write(cfg)
    with open(os.path.join(directory, "adapter_model.safetensors"), "wb") as f:
        f.write(w)
    return cfg, w
