#!/usr/bin/env python3
"""Builds the reference tokenizers the parity tests compare against.

  smollm2/tokenizer.json  from the SmolLM2 GGUF vocab + merges, assembled with
                          the HF `tokenizers` API in SmolLM2's real configuration
                          (Digits(individual) + ByteLevel(GPT-2 regex), ByteLevel
                          decoder, CONTROL tokens as special added tokens).
  mistral/tokenizer.json  the Mistral-7B-v0.1 SentencePiece model
                          (mistral-common==1.5.0, data/tokenizer.model.v1)
                          converted by transformers' own LlamaConverter (legacy
                          Llama/Mistral form), plus the "<s> $A" post-processor
                          LlamaTokenizerFast installs.
  mistral/vocab.gguf      a vocab-only GGUF of the same model (tokenizer.ggml.*
                          "llama": tokens, scores, types), for our GGUF SPM path.

Usage: make_tokenizers.py [--smollm2-gguf PATH] [--spm-model PATH] [--out DIR]
Needs: pip install tokenizers gguf==0.19.0 transformers sentencepiece protobuf
Deterministic: re-running produces identical files.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def gguf_field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    if f.types and f.types[0].name == "ARRAY":
        sub = f.types[1].name if len(f.types) > 1 else None
        if sub == "STRING":
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types and f.types[0].name == "STRING":
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def make_smollm2(gguf_path, out_dir):
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = GGUFReader(gguf_path)
    tokens = gguf_field(r, "tokenizer.ggml.tokens")
    types = gguf_field(r, "tokenizer.ggml.token_type")
    merges = gguf_field(r, "tokenizer.ggml.merges")
    assert gguf_field(r, "tokenizer.ggml.model") == "gpt2"
    assert gguf_field(r, "tokenizer.ggml.pre") == "smollm"
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab, pairs))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types[i] == 3])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path, pretty=False)
    return path


def fetch_spm_model(tmp):
    """Downloads mistral-common==1.5.0 and extracts tokenizer.model.v1."""
    subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                           "mistral-common==1.5.0", "-d", tmp])
    whl = [f for f in os.listdir(tmp) if f.endswith(".whl")][0]
    with zipfile.ZipFile(os.path.join(tmp, whl)) as z:
        z.extract("mistral_common/data/tokenizer.model.v1", tmp)
    return os.path.join(tmp, "mistral_common/data/tokenizer.model.v1")


def make_mistral(spm_model, out_dir):
    import types as pytypes

    import sentencepiece as spm
    from tokenizers import processors
    import importlib
    csl = importlib.import_module("transformers.convert_slow_tokenizer")
    from transformers.tokenization_utils_base import generate_merges

    sp = spm.SentencePieceProcessor(model_file=spm_model)

    class Extractor(csl.SentencePieceExtractor):
        # transformers 4.x semantics: merges ordered by the merged piece's score.
        # (5.x's LlamaConverter passes vocab_scores where extract() expects a
        # model type; this shim restores the 4.x behaviour.)
        def extract(self, vocab_scores=None):
            vocab = {p.piece: i for i, p in enumerate(self.proto.pieces)}
            return vocab, generate_merges(vocab, vocab_scores)

    class Converter(csl.LlamaConverter):
        SpmExtractor = Extractor

    orig = pytypes.SimpleNamespace(vocab_file=spm_model, legacy=True, add_prefix_space=True,
                                   convert_ids_to_tokens=sp.id_to_piece)
    tok = Converter(orig).converted()
    # LlamaTokenizerFast registers unk/bos/eos as special tokens; the 5.x
    # converter only adds control pieces, so add <unk> as the 4.x files have it.
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(sp.id_to_piece(sp.unk_id()), special=True, normalized=False)])
    # what LlamaTokenizerFast.update_post_processor() installs (add_bos_token=True)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A:0", pair="<s> $A:0 <s> $B:1", special_tokens=[("<s>", 1)])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path, pretty=False)

    # vocab-only GGUF as llama.cpp's convert_hf_to_gguf writes it for SPM
    from gguf import GGUFWriter
    n = sp.get_piece_size()
    toks, scores, ttypes = [], [], []
    for i in range(n):
        toks.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            ttypes.append(2)
        elif sp.is_control(i):
            ttypes.append(3)
        elif sp.is_unused(i):
            ttypes.append(5)
        elif sp.is_byte(i):
            ttypes.append(6)
        else:
            ttypes.append(1)
    gpath = os.path.join(out_dir, "vocab.gguf")
    w = GGUFWriter(gpath, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(ttypes)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, gpath


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2-gguf", default=os.environ.get(
        "LG_SMOLLM2_GGUF", os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--spm-model", default=None, help="tokenizer.model.v1 (downloaded if absent)")
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures"))
    a = ap.parse_args()
    if os.path.exists(a.smollm2_gguf):
        p = make_smollm2(a.smollm2_gguf, os.path.join(a.out, "smollm2"))
        print(p, os.path.getsize(p))
    else:
        print("skip smollm2: no GGUF at", a.smollm2_gguf)
    with tempfile.TemporaryDirectory() as tmp:
        spm_model = a.spm_model or fetch_spm_model(tmp)
        for p in make_mistral(spm_model, os.path.join(a.out, "mistral")):
            print(p, os.path.getsize(p))


if __name__ == "__main__":
    main()
