"""Parity of `loragate tokenize` with the HF `tokenizers` package.

For each reference tokenizer (SmolLM2 byte-level BPE, Mistral-7B-v0.1
SentencePiece BPE) and each of our load paths (tokenizer.json, GGUF vocab),
every corpus string is encoded and decoded by both and compared id-for-id and
string-for-string, with special-token parsing on and off and with/without
add_special_tokens. The incremental detokenizer's pieces must concatenate to
the full decode (and each is valid UTF-8: the binary refuses otherwise).
Random id sequences check decode alone (split byte tokens, specials).

Binary: $LG_BIN or build/loragate (run as `LG_BIN tokenize ...`).
SmolLM2 GGUF: $LG_SMOLLM2_GGUF or .models/SmolLM2-135M-Instruct.Q4_1.gguf.
Run as a script for a mismatch report: python3 tests/tokenizer/test_parity.py
"""
import json
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(HERE, "fixtures")

tokenizers = pytest.importorskip("tokenizers")


def lg_bin():
    return os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate"))


def smollm2_gguf():
    return os.environ.get("LG_SMOLLM2_GGUF", os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf"))


def load_corpus():
    with open(os.path.join(HERE, "corpus.jsonl"), encoding="utf-8") as f:
        return [json.loads(l)["text"] for l in f if l.strip()]


# name -> (HF tokenizer.json, our args, file that must exist)
CASES = {
    "smollm2-json": ("smollm2/tokenizer.json", lambda: ["--tokenizer", os.path.join(FIX, "smollm2/tokenizer.json")], None),
    "smollm2-gguf": ("smollm2/tokenizer.json", lambda: ["--gguf", smollm2_gguf()], smollm2_gguf),
    "mistral-json": ("mistral/tokenizer.json", lambda: ["--tokenizer", os.path.join(FIX, "mistral/tokenizer.json")], None),
    "mistral-gguf": ("mistral/tokenizer.json", lambda: ["--gguf", os.path.join(FIX, "mistral/vocab.gguf")], None),
}


LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")


def _bytelevel(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def _split(pattern, behavior, regex=True):
    return {"type": "Split", "pattern": {"Regex" if regex else "String": pattern}, "behavior": behavior,
            "invert": False}


# Variants of the fixtures exercising the pre-tokenizer forms of other
# families: name -> (base fixture, edit of the JSON dict). Our side loads the
# same edited file, so these check the pipeline pieces, not the vocab.
def _v_llama3(j):
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [_split(LLAMA3_RE, "Isolated"), _bytelevel(False)]}
    j["model"]["ignore_merges"] = True


def _v_qwen2(j):
    # Qwen2's tokenizer.json: NFC normalizer, then its split regex and ByteLevel
    # (49 corpus strings are not NFC, so the normalizer is exercised)
    j["normalizer"] = {"type": "NFC"}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [_split(QWEN2_RE, "Isolated"), _bytelevel(False)]}


def _v_behavior(b):
    def f(j):
        j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": False}, _split(" ", b, regex=False),
            _split(r"\p{P}+", "Isolated"), _bytelevel(False)]}
    return f


def _v_prefix_space(j):
    j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


def _v_metaspace(scheme):
    def f(j):
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": False}
    return f


def _v_metaspace_split(j):
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    j["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}


VARIANTS = {
    "llama3-style": ("smollm2/tokenizer.json", _v_llama3),
    "qwen2-style": ("smollm2/tokenizer.json", _v_qwen2),
    "bytelevel-prefix-space": ("smollm2/tokenizer.json", _v_prefix_space),
    "split-merged-prev": ("smollm2/tokenizer.json", _v_behavior("MergedWithPrevious")),
    "split-merged-next": ("smollm2/tokenizer.json", _v_behavior("MergedWithNext")),
    "split-contiguous": ("smollm2/tokenizer.json", _v_behavior("Contiguous")),
    "split-removed": ("smollm2/tokenizer.json", _v_behavior("Removed")),
    "metaspace-first": ("mistral/tokenizer.json", _v_metaspace("first")),
    "metaspace-always": ("mistral/tokenizer.json", _v_metaspace("always")),
    "metaspace-split": ("mistral/tokenizer.json", _v_metaspace_split),
}


def variant_path(name, tmpdir):
    base, edit = VARIANTS[name]
    path = os.path.join(tmpdir, name + ".json")
    if not os.path.exists(path):
        with open(os.path.join(FIX, base), encoding="utf-8") as f:
            j = json.load(f)
        edit(j)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f)
    return path


def compare_variant(name, tmpdir, corpus, special=True):
    path = variant_path(name, tmpdir)
    CASES[name] = (path, lambda: ["--tokenizer", path], None)
    return compare(name, special, False, corpus)


def run_lg(args, inputs):
    exe = lg_bin()
    if not os.path.exists(exe):
        pytest.skip(f"no loragate binary at {exe} (set LG_BIN)")
    data = "".join(json.dumps(x) + "\n" for x in inputs)
    p = subprocess.run([exe, "tokenize"] + args, input=data.encode(), capture_output=True, timeout=600)
    out = [json.loads(l) for l in p.stdout.decode().split("\n") if l]
    assert len(out) == len(inputs), p.stderr.decode()[-2000:]
    return out


def hf_tok(rel):
    return tokenizers.Tokenizer.from_file(os.path.join(FIX, rel))


def compare(case, special, add_bos, corpus):
    """Returns a list of human-readable mismatch descriptions."""
    rel, args, need = CASES[case]
    if need and not os.path.exists(need()):
        pytest.skip(f"{case}: model file {need()} absent (set LG_SMOLLM2_GGUF)")
    hf = hf_tok(rel)
    hf.encode_special_tokens = not special
    a = args() + ["--pieces"] + ([] if special else ["--no-special"]) + (["--add-bos"] if add_bos else [])
    ours = run_lg(a, [{"text": s} for s in corpus])
    bad = []
    for s, o in zip(corpus, ours):
        if "error" in o:
            bad.append(f"{s!r}: error {o['error']}")
            continue
        ref = hf.encode(s, add_special_tokens=add_bos).ids
        if o["ids"] != ref:
            i = next((k for k in range(min(len(ref), len(o["ids"]))) if ref[k] != o["ids"][k]), min(len(ref), len(o["ids"])))
            bad.append(f"{s!r}: ids differ at {i}: hf {ref[i:i+6]} ours {o['ids'][i:i+6]}")
            continue
        for key, skip in (("decoded", False), ("decoded_skip", True)):
            d = hf.decode(ref, skip_special_tokens=skip)
            if o[key] != d:
                bad.append(f"{s!r}: {key} hf {d!r} ours {o[key]!r}")
        for key, dkey in (("pieces", "decoded"), ("pieces_skip", "decoded_skip")):
            if "".join(o[key]) != o[dkey]:
                bad.append(f"{s!r}: {key} concat {''.join(o[key])!r} != {o[dkey]!r}")
    return bad


def random_id_seqs(hf, n, seed):
    r = random.Random(seed)
    v = hf.get_vocab_size()
    bytes_ids = [hf.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    bytes_ids = [i for i in bytes_ids if i is not None]
    seqs = []
    for _ in range(n):
        k = r.randint(0, 12)
        seq = []
        for _ in range(k):
            x = r.random()
            if x < 0.15:
                seq.append(r.randint(0, 20))  # specials live low in both vocabs
            elif x < 0.45 and bytes_ids:
                seq.append(r.choice(bytes_ids))
            elif x < 0.55:
                seq.append(r.randint(180, 400))  # byte-level single chars / short pieces
            else:
                seq.append(r.randrange(v))
        seqs.append(seq)
    # a multi-byte char split into its byte tokens, then cut short
    for s in ["😀", "日本", "é", "👨‍👩‍👧"]:
        ids = hf.encode(s, add_special_tokens=False).ids
        seqs += [ids, ids[:-1], ids[1:], ids + ids[:1]]
    return seqs


def compare_decode(case, n=600):
    rel, args, need = CASES[case]
    if need and not os.path.exists(need()):
        pytest.skip(f"{case}: model file {need()} absent")
    hf = hf_tok(rel)
    seqs = random_id_seqs(hf, n, 7)
    ours = run_lg(args() + ["--pieces"], [{"ids": s} for s in seqs])
    bad = []
    for s, o in zip(seqs, ours):
        if "error" in o:
            bad.append(f"{s}: error {o['error']}")
            continue
        for key, skip in (("decoded", False), ("decoded_skip", True)):
            d = hf.decode(s, skip_special_tokens=skip)
            if o[key] != d:
                bad.append(f"{s}: {key} hf {d!r} ours {o[key]!r}")
        for key, dkey in (("pieces", "decoded"), ("pieces_skip", "decoded_skip")):
            if "".join(o[key]) != o[dkey]:
                bad.append(f"{s}: {key} concat != {dkey}")
    return bad


def report(bad, limit=15):
    return f"{len(bad)} mismatches:\n" + "\n".join(bad[:limit])


@pytest.fixture(scope="module")
def corpus():
    xs = load_corpus()
    assert len(xs) >= 1000
    return xs


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("special,add_bos", [(True, False), (False, False), (True, True)])
def test_encode_decode_parity(case, special, add_bos, corpus):
    bad = compare(case, special, add_bos, corpus)
    assert not bad, report(bad)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_parity(name, corpus, tmp_path_factory):
    bad = compare_variant(name, str(tmp_path_factory.getbasetemp()), corpus)
    assert not bad, report(bad)


@pytest.mark.parametrize("case", list(CASES))
def test_decode_random_ids(case):
    bad = compare_decode(case)
    assert not bad, report(bad)


if __name__ == "__main__":
    xs = load_corpus()
    for case in CASES:
        for special, add_bos in [(True, False), (False, False), (True, True)]:
            try:
                bad = compare(case, special, add_bos, xs)
            except BaseException as e:  # pytest.skip raises
                print(f"{case} special={special} add_bos={add_bos}: skipped ({e})")
                continue
            print(f"{case} special={special} add_bos={add_bos}: {len(xs)} strings, {report(bad, 8)}")
        try:
            bad = compare_decode(case)
            print(f"{case} random-id decode: {report(bad, 8)}")
        except BaseException as e:
            print(f"{case} random-id decode: skipped ({e})")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for name in VARIANTS:
            bad = compare_variant(name, tmp, xs)
            print(f"variant {name}: {len(xs)} strings, {report(bad, 8)}")
    sys.exit(0)
