"""
test_speculative_golden.py — speculative decoding (engine/runtime/speculate.c,
n-gram proposals) on the golden fixtures: greedy output identical to no
speculation, and equal to the HF float64 reference path (test_golden.py's
rules), for every fixture model and for a mixed batch of every PEFT adapter
of lora_fixtures (the target verifies with each request's own adapter).

Each model runs twice over one --batch of all its prompts, greedy, 32 tokens
(and the LoRA batch a third time with a draft model proposing):
    $LG_BIN generate --model M --batch F --max-tokens 32 --temperature 0 --json --stats
    ... the same with --speculative ngram --ngram-min 1 --speculative-min-accept 0
and the token lists must be equal line by line; the speculative run's stats
must show verification steps with accepted proposals (a random tiny model's
greedy output soon loops, so prompt lookup has something to find), or the
test proves nothing. The first n_greedy tokens must also follow the
reference while its steps are clear.
Env: LG_BIN, LG_BACKEND, LG_GENERATE_EXTRA, LG_GOLDEN_TIMEOUT (as test_golden.py).
"""
import json
import os
import subprocess

import pytest

import test_golden as tg
import test_lora_golden as tl

SPEC = ["--speculative", "ngram", "--ngram-min", "1", "--speculative-min-accept", "0",
        "--speculative-max-batch", "64"]
N_TOKENS = 32


def _run(model, lines, extra, tmp_path, tag):
    path = tmp_path / f"{tag}.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    cmd = [tg.LG_BIN, "generate", "--model", model, "--backend", tg.LG_BACKEND, "--batch", str(path),
           "--max-tokens", str(N_TOKENS), "--temperature", "0", "--json", "--stats", *tg.LG_GENERATE_EXTRA, *extra]
    p = subprocess.run(cmd, cwd=tg.ROOT, capture_output=True, text=True, timeout=max(tg.TIMEOUT, 120))
    tg.skip_unsplittable(p)
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\nstderr:\n{p.stderr[-4000:]}"
    objs = [json.loads(s) for s in p.stdout.splitlines() if s.strip().startswith("{")]
    assert len(objs) == len(lines), p.stdout[-2000:]
    stats = objs[-1].pop("stats")
    for o in objs:
        assert "error" not in o, o
    return [o["tokens"] for o in objs], stats


def _need_binary():
    if not os.access(tg.LG_BIN, os.X_OK):
        pytest.skip(f"loragate binary not found at {tg.LG_BIN} (build it, or set LG_BIN)")


@pytest.mark.parametrize("name", tg._fixture_names())
def test_greedy_speculative_equals_plain(name, tmp_path):
    _need_binary()
    ref = tg._load_ref(name)
    model = os.path.join(tg.FIXTURES, name)
    lines = [{"prompt_tokens": p["ids"]} for p in ref["prompts"]]
    plain, _ = _run(model, lines, [], tmp_path, "plain")
    spec, st = _run(model, lines, SPEC, tmp_path, "spec")
    assert spec == plain, f"{name}: speculative greedy output differs from plain:\n{spec}\n{plain}"
    assert st["spec_verify_rows"] > 0 and st["spec_accepted"] > 0, f"{name}: nothing was verified: {st}"
    for p, got in zip(ref["prompts"], spec):
        msg = tg.compare_tokens(ref, p, got[:ref["n_greedy"]] if len(got) > ref["n_greedy"] else got)
        assert msg is None, f"{name}: {msg}"


DRAFT = os.path.join(tg.FIXTURES, "llama_gqa_f32")  # another tiny Llama of the lora base's vocabulary (320)


@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_lora_mixed_batch_speculative_equals_plain(mode, tmp_path):
    """Every adapter and the base model in one batch: the same greedy tokens with and without speculation
    (n-gram proposals, or a draft model's: base weights only, verified with each request's adapter), and the
    reference's while its steps are clear."""
    _need_binary()
    spec = SPEC if mode == "ngram" else ["--speculative", "draft", "--draft-model", DRAFT,
                                         "--speculative-min-accept", "0", "--speculative-max-batch", "64"]
    lines = []
    for c in tl.CASES:
        line = {"prompt_tokens": c["ids"]}
        if c["adapter"]:
            line["lora"] = c["adapter"]
        lines.append(line)
    model = os.path.join(tl.FIX, tl.REF["base"])
    la = tl._lora_args(tl.ADAPTERS)
    plain, _ = _run(model, lines, la, tmp_path, "plain")
    spec, st = _run(model, lines, la + spec, tmp_path, "spec")
    assert spec == plain, f"speculative ({mode}) greedy output differs from plain with adapters"
    assert st["spec_verify_rows"] > 0 and st["spec_accepted"] > 0, st
    eos = set(tl.REF["eos_token_ids"] or [])
    for c, got in zip(tl.CASES, spec):
        msg = tl.compare_tokens(c, got[:tl.REF["n_greedy"]], eos)
        assert msg is None, f"{tl._case_id(c)}: {msg}"


def test_self_draft_is_accepted(tmp_path):
    """A model as its own draft proposes its own greedy path: equal output, and (nearly) every proposal
    accepted."""
    _need_binary()
    name = "llama_mha_f32"
    ref = tg._load_ref(name)
    model = os.path.join(tg.FIXTURES, name)
    lines = [{"prompt_tokens": p["ids"]} for p in ref["prompts"]]
    plain, _ = _run(model, lines, [], tmp_path, "plain")
    spec, st = _run(model, lines, ["--speculative", "draft", "--draft-model", model], tmp_path, "spec")
    assert spec == plain
    assert st["spec_proposed"] > 0 and st["spec_accepted"] >= 0.95 * st["spec_proposed"], st
