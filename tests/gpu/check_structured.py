"""check_structured.py — structured output on the CUDA backend (run on the GPU
machine by run_device.sh's `structured` step; needs torch, numpy and
safetensors, which the GPU image has; jsonschema when present).

Builds a small random Llama (seeded; 2 layers, hidden 64) with SmolLM2's
real tokenizer (tests/tokenizer/fixtures/smollm2/tokenizer.json, 49,152
tokens), then runs `loragate generate --backend cuda --json-schema` over a
few bounded schemas at temperature 1 with several seeds, one request at a
time and all at once (--batch: every row of a step masked), twice: with the
grammar masks applied on the device before the device sampler
(LG_DEVICE_MASKS=1, the default) and on the host to downloaded rows
(LG_DEVICE_MASKS=0). Checks: the same tokens either way (a seed gives the
same output whichever side masks and samples), every finished output parses
as JSON and validates against its schema. Prints a table; exit 1 on a
mismatch.

    python3 tests/gpu/check_structured.py build-cuda/loragate
"""
import json
import os
import subprocess
import sys
import tempfile


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER = os.path.join(ROOT, "tests", "tokenizer", "fixtures", "smollm2", "tokenizer.json")

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"status": {"enum": ["open", "closed", "pending"]},
                                      "ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                                               "maxItems": 3}},
     "required": ["status", "ok", "tags"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 2, "maxItems": 6},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                                         "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                                            {"type": "null"}]}},
                        "required": ["v", "next"], "additionalProperties": False}},
     "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
                                      "score": {"type": "number", "minimum": 0, "maximum": 1}},
     "required": ["id", "score"], "additionalProperties": False},
]


def make_model(d):
    import torch
    from safetensors.torch import save_file
    V, H, I, L, NH, NKV = 49152, 64, 128, 2, 4, 2
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
           "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    g = torch.Generator().manual_seed(7)
    hd = H // NH
    W = {"model.embed_tokens.weight": torch.randn(V, H, generator=g) * 0.5,
         "lm_head.weight": torch.randn(V, H, generator=g) * 0.3, "model.norm.weight": torch.ones(H)}
    for i in range(L):
        p = f"model.layers.{i}."
        for n, shape in (("self_attn.q_proj", (NH * hd, H)), ("self_attn.k_proj", (NKV * hd, H)),
                         ("self_attn.v_proj", (NKV * hd, H)), ("self_attn.o_proj", (H, NH * hd)),
                         ("mlp.gate_proj", (I, H)), ("mlp.up_proj", (I, H)), ("mlp.down_proj", (H, I))):
            W[p + n + ".weight"] = torch.randn(*shape, generator=g) * 0.1
        W[p + "input_layernorm.weight"] = torch.ones(H)
        W[p + "post_attention_layernorm.weight"] = torch.ones(H)
    save_file({k: v.contiguous() for k, v in W.items()}, os.path.join(d, "model.safetensors"))
    with open(TOKENIZER) as f, open(os.path.join(d, "tokenizer.json"), "w") as g2:
        g2.write(f.read())


def validate(schema, text):
    try:
        v = json.loads(text)
    except ValueError as e:
        return f"not JSON: {e}"
    try:
        import jsonschema
        jsonschema.validate(v, schema)
    except ImportError:
        pass
    except Exception as e:  # jsonschema.ValidationError
        return f"invalid: {str(e).splitlines()[0]}"
    return None


def run(binary, model, schema_file, env_masks, args):
    env = dict(os.environ, LG_DEVICE_MASKS=env_masks)
    cmd = [binary, "generate", "--model", model, "--backend", "cuda", "--json-schema", schema_file, "--temperature",
           "1", "--max-tokens", "160", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr[-800:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-cuda", "loragate")
    bad = 0
    rows = []
    with tempfile.TemporaryDirectory() as d:
        make_model(d)
        for si, schema in enumerate(SCHEMAS):
            sf = os.path.join(d, f"schema{si}.json")
            json.dump(schema, open(sf, "w"))
            batch = os.path.join(d, f"batch{si}.jsonl")
            with open(batch, "w") as f:
                for k in range(16):
                    f.write(json.dumps({"prompt": f"record {k}:", "seed": 100 + k, "temperature": 1.0}) + "\n")
            outs = {}
            for masks in ("1", "0"):
                single = [run(binary, d, sf, masks, ["--prompt", "data:", "--seed", str(s), "--json"])[0]
                          for s in (1, 2, 3)]
                outs[masks] = single + run(binary, d, sf, masks, ["--batch", batch])
            same = [a["tokens"] == b["tokens"] for a, b in zip(outs["1"], outs["0"])]
            n_valid = n_fin = 0
            for o in outs["1"]:
                if o.get("finish_reason") == "stop":
                    n_fin += 1
                    why = validate(schema, o["text"])
                    if why:
                        bad += 1
                        print(f"schema {si}: {why}: {o['text'][:200]!r}")
                    else:
                        n_valid += 1
            if not all(same):
                bad += 1
                i = same.index(False)
                print(f"schema {si}: output {i} differs: device {outs['1'][i]['text'][:120]!r} host "
                      f"{outs['0'][i]['text'][:120]!r}")
            rows.append(f"schema {si}: {len(same)} outputs, device == host masks: {sum(same)}/{len(same)}, "
                        f"finished {n_fin}, valid {n_valid}/{n_fin}")
    for r in rows:
        print(r)
    print("structured output on cuda:", "OK" if not bad else f"{bad} FAILURES")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
