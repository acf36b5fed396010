#!/usr/bin/env python3
"""pack_adapter_seeds.py OUT_DIR — the golden LoRA fixtures' adapters as fuzz_adapter.c inputs:
2 bytes (little endian) of config length, adapter_config.json, adapter_model.safetensors.
Fixtures over 64 KB are left out (the fuzzer's -max_len)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "golden", "lora_fixtures")

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for name in sorted(os.listdir(FIX)):
    d = os.path.join(FIX, name)
    cfg, st = os.path.join(d, "adapter_config.json"), os.path.join(d, "adapter_model.safetensors")
    if not (os.path.isfile(cfg) and os.path.isfile(st)):
        continue
    c, s = open(cfg, "rb").read(), open(st, "rb").read()
    if len(c) + len(s) + 2 > 65536:
        continue
    with open(os.path.join(out, "seed_" + name), "wb") as f:
        f.write(len(c).to_bytes(2, "little") + c + s)
    print(name, len(c) + len(s) + 2)
