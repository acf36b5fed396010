#!/usr/bin/env python3
"""Writes tests/tokenizer/corpus.jsonl: >= 1000 varied strings, one JSON
object {"text": ...} per line, deterministically (fixed seed, no clock).

Families: English prose, code in several languages, whitespace runs (tabs,
newlines, CR, many spaces, Unicode spaces), accents (composed and decomposed),
emoji incl. ZWJ sequences / skin tones / flags, CJK, Arabic / Hebrew /
Devanagari / Thai / Korean, numbers of many lengths, contractions with odd
case, special tokens embedded (<|im_start|>, <s>, </s>, <unk>, ...), control
chars and U+FFFD / BOM / private use, the empty string, and random mixes.
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "Hello world! How are you doing today?",
    "In 1969, Apollo 11 landed on the Moon; 600 million people watched.",
    "She said, \"I'll be there at 5:30 p.m.\" -- but she wasn't.",
    "Multi-tenant LoRA serving lets many adapters share one base model.",
    "Don't panic. Isn't it odd? We've seen they'd rather you'll not.",
    "E-mail me at john.doe@example.com or visit https://example.org/path?q=1&x=2#frag",
    "Prices: $19.99, €5,00, £3.50, ¥1000 and 15% off!!!",
    "A long time ago in a galaxy far, far away....",
    "Mr. O'Neil's dog's bone's gone.",
    "The U.S.A. and the U.K. signed the treaty on 2024-03-15T10:20:30Z.",
]
CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (let i = 0; i < arr.length; i++) { console.log(arr[i]); }",
    "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![1, 2, 3];\n    Ok(())\n}",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC LIMIT 10;",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "<html><body><div class=\"x\">Hi &amp; bye</div></body></html>",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "    x = [i**2 for i in range(10) if i % 2 == 0]  # squares\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
    "public static void main(String[] args) { System.out.println(args.length); }",
    "x := map[string]int{\"a\": 1}; y <<= 2; z ||= w && !v; a->b::c",
    "\\begin{equation} E = mc^2 \\end{equation}",
]
WS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\n \n",
      "        ", " \t \n", "\u00a0", "\u3000", "\u2003", "\u200b", "\u0085", "\u2028", "\x0b", "\x0c"]
ACCENTS = ["café", "naïve", "résumé", "Ångström", "über", "São Paulo", "Dvořák", "Łódź", "ﬁne",
           "cafe\u0301", "n\u0303", "e\u0301\u0301", "Ĳssel", "straße", "ΑΒΓ αβγ", "Ωmega",
           "Привет, мир!", "Zürich", "façade", "crème brûlée", "ǅ ǈ ǋ"]
EMOJI = ["😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🧑🏿‍💻", "🏳️‍🌈", "🇯🇵", "🇺🇸🇫🇷", "❤️", "✨", "🤖", "🫠",
         "👩🏻‍❤️‍💋‍👨🏼", "1️⃣", "©️", "™", "🔥🔥🔥", "😂😂", "🐍", "☃"]
SCRIPTS = ["日本語のテキストです。", "中文字符测试，你好世界！", "한국어 문장입니다.", "สวัสดีครับ",
           "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "Ελληνικά", "ქართული", "Հայերեն",
           "ᚠᛇᚻ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "ﾊﾝｶｸ", "ｆｕｌｌｗｉｄｔｈ", "木口牛馬魚鳥", "𠀀𠀁"]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<repo_name>",
           "<file_sep>", "<|im_start", "im_start|>", "<<s>>", "<s><s>", "</s></s>", "<|im_end|><|im_start|>"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
                "’s", "''", "'", "'x", "'ſ"]
ODD = ["\x00", "\x01", "\x1b[31m", "\x7f", "\u0080", "\u00ad", "\ufeff", "\ufffd", "\uffff",
       "\ue000", "\U0010ffff", "Ã©", "Ã¼ber", "\\xff\\xfe", "�", "\u200d", "\u200e\u200f",
       "\u0301", "ــ", "\u0600", "\U0001d400"]


def numbers(r):
    k = r.randint(1, 25)
    s = "".join(r.choice("0123456789") for _ in range(k))
    return r.choice([s, "-" + s, s + "." + str(r.randint(0, 999)), "1,234,567", "3.14159",
                     "0x" + s[:8], "1e-9", "٣٤٥", "१२३", "½", "Ⅻ", "²³", s + "th", "v" + s[:3] + ".0"])


def mix(r, n):
    pools = [PROSE, CODE, WS, ACCENTS, EMOJI, SCRIPTS, SPECIAL, CONTRACTIONS, ODD]
    out = []
    for _ in range(n):
        p = r.choice(pools)
        out.append(r.choice(p) if p is not CONTRACTIONS else r.choice(["it", "He", "WE", "x"]) + r.choice(p))
        if r.random() < 0.3:
            out.append(numbers(r))
        if r.random() < 0.5:
            out.append(r.choice(WS))
    return "".join(out)


def corpus():
    r = random.Random(20240521)
    xs = ["", " ", "  ", "\n", "a", "A", "0", "00", "000", "0000", "12345678901234567890"]
    xs += PROSE + CODE + WS + ACCENTS + EMOJI + SCRIPTS + SPECIAL + ODD
    xs += [" " + s for s in PROSE[:6]] + ["  " + s for s in SCRIPTS[:4]]
    # contractions in context, odd cases
    for c in CONTRACTIONS:
        xs += ["it" + c, "IT" + c + " go", " " + c, c + c]
    # whitespace runs of all lengths around words
    for n in range(1, 18):
        xs += ["a" + " " * n + "b", "x" + "\t" * (n % 5 + 1) + "y" + "\n" * (n % 4), " " * n,
               "\n" * n + "z", "w" + " " * n]
    # numbers of many lengths
    for n in range(1, 31):
        xs += ["".join(str((i * 7 + n) % 10) for i in range(n)), "v" + "9" * n, "x" + str(10 ** n)]
    for _ in range(60):
        xs.append(numbers(r))
    # special tokens embedded
    for sp in SPECIAL:
        xs += [sp + "user\nHi" + sp, "Hello" + sp + "world", " " + sp + " ", sp + " " + sp,
               "a" + sp, sp + "\n"]
    xs += ["<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
           "<s>[INST] What is 2+2? [/INST] 4</s>", "<s> <s>  </s>", "<unk><unk>x"]
    # emoji compositions
    for e in EMOJI:
        xs += [e * 3, "x" + e + "y", " " + e, e + " " + e]
    # accents composed vs decomposed
    for a in ACCENTS:
        xs += [a.upper(), a.lower() + "'s", " " + a]
    for s in SCRIPTS:
        xs += [s + s, s[: len(s) // 2], "(" + s + ")", s + "123"]
    for o in ODD:
        xs += ["a" + o + "b", o * 2, " " + o]
    # random mixes of everything
    while len(xs) < 1200:
        xs.append(mix(r, r.randint(1, 12)))
    # a few long ones
    xs.append(" ".join(PROSE) * 3)
    xs.append("".join(CODE))
    xs.append("ab" * 500)
    xs.append(" " * 300 + "end")
    xs.append("🙂" * 100)
    xs.append("x" * 2000)
    return xs


def main():
    xs = corpus()
    path = os.path.join(HERE, "corpus.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for s in xs:
            f.write(json.dumps({"text": s}, ensure_ascii=True) + "\n")
    print(path, len(xs))


if __name__ == "__main__":
    main()
