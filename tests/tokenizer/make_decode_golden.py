#!/usr/bin/env python3
"""Writes tests/tokenizer/tiny-bpe/decode_golden.json: what Hugging Face decodes.

The golden of worker/model/tokenizer_decoder (tests/worker/model/
tokenizer_decoder_test.cc). Each case holds token ids and the text that
transformers' decode() makes of them, with and without skip_special_tokens:

  - "encode" cases: strings (ASCII, accented Latin, CJK, emoji, control
    characters, the tokenizer's special tokens) encoded by the tokenizer;
  - "bytes" cases: ids of single-byte tokens that cut a character in two or
    are not UTF-8 at all, pinning where U+FFFD goes;
  - "added" cases: a copy of the tokenizer with more added tokens (one whose
    content is outside the byte-level alphabet, one inside it, a special one
    that reuses a vocabulary id); its whole added_tokens list is recorded so
    the C++ test can rebuild that tokenizer.json;
  - "clean_up" cases: tokenizer_config.json settings that do or do not make
    transformers apply clean_up_tokenization (" ." -> ".") to a BPE tokenizer.

Rerun after changing the tokenizer or the cases (needs scripts/bootstrap
--data-tools):

    .venv-data/bin/python tests/tokenizer/make_decode_golden.py
"""
import json
import os
import pathlib
import shutil
import tempfile

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import AddedToken, Tokenizer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
TOKENIZER = HERE / "tiny-bpe"
OUT = TOKENIZER / "decode_golden.json"

TEXTS = [
    "Hello world! StreamBP trains long sequences.",
    "héllo wörld — naïve café, Ångström, Œuvre",
    "中文分词测试，日本語のテキスト、한국어",
    "emoji 🙂👍🏽 and a family 👨‍👩‍👧 🏳️‍🌈",
    "line one\n\tline two\r\n  indented\n\n\nend\t",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
    "<|endoftext|>text between<|endoftext|><|im_end|>",
    "  leading and trailing spaces  ",
    "x",
    "",
]

# Tokens added to a copy of the tokenizer for the "added" cases.
EXTRA_TOKENS = [
    AddedToken("<think> x", special=False),  # ' ' is outside the alphabet: its UTF-8
    AddedToken("Ġzz", special=False),        # inside it: byte-mapped like vocabulary
    AddedToken("<tool>", special=True),
    AddedToken("Ã", special=True),           # an existing vocabulary token made special
]


def bytes_to_unicode():
    """GPT-2's table, as tokenizers/transformers define it."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def byte_ids(raw, data):
    table = bytes_to_unicode()
    ids = [raw.token_to_id(table[b]) for b in data]
    assert None not in ids, data
    return ids


def case(hf, name, ids):
    return {"name": name, "ids": ids,
            "text": hf.decode(ids, skip_special_tokens=False),
            "text_skip_special": hf.decode(ids, skip_special_tokens=True)}


def main():
    hf = AutoTokenizer.from_pretrained(str(TOKENIZER))
    raw = Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
    cases = []
    for i, text in enumerate(TEXTS):
        ids = list(hf(text, add_special_tokens=False)["input_ids"])
        c = case(hf, "encode %d" % i, ids)
        assert c["text"] == text, (text, c["text"])  # byte-level BPE is lossless
        cases.append(c)

    # Bytes that are not whole UTF-8 characters.
    a, b = raw.token_to_id("a"), raw.token_to_id("b")
    end = raw.token_to_id("<|im_end|>")
    for name, prefix, data, suffix in (
            ("first byte of 'é' then 'a'", [], "é".encode()[:1], [a]),
            ("last byte of 'é' only", [], "é".encode()[1:], []),
            ("two of three bytes of '中' at the end", [a], "中".encode()[:2], []),
            ("three of four bytes of '🙂' then 'b'", [], "🙂".encode()[:3], [b]),
            ("a cut '中' before a special token", [], "中".encode()[:2], [end, a]),
            ("a cut '中' inside a whole '中'", [], "中".encode()[:1] + "中".encode(), []),
            ("bytes 0xFF 0xFE 0x80", [a], b"\xff\xfe\x80", [b]),
            ("overlong 0xC0 0xAF", [], b"\xc0\xaf", []),
            ("surrogate 0xED 0xA0 0x80", [], b"\xed\xa0\x80", []),
            ("beyond U+10FFFF 0xF4 0x90 0x80 0x80", [], b"\xf4\x90\x80\x80", []),
            ("0xE0 0x80 (bad second byte)", [], b"\xe0\x80", [a]),
            ("0xF0 0x9F 0x99 then 'b' then 0x82", [], b"\xf0\x9f\x99",
             [b] + byte_ids(raw, b"\x82")),
    ):
        cases.append(case(hf, "bytes: " + name, prefix + byte_ids(raw, data) + suffix))

    # A copy with more added tokens, loaded through transformers as a user would.
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        extended = Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
        extended.add_tokens(EXTRA_TOKENS)
        extended.save(str(tmp / "tokenizer.json"))
        shutil.copy(TOKENIZER / "tokenizer_config.json", tmp / "tokenizer_config.json")
        added_tokens = json.loads((tmp / "tokenizer.json").read_text())["added_tokens"]
        hf_added = AutoTokenizer.from_pretrained(str(tmp))
        added_cases = []
        think, zz, tool = (extended.token_to_id(t) for t in ("<think> x", "Ġzz", "<tool>"))
        a_tilde = extended.token_to_id("Ã")
        copyright_ = extended.token_to_id("©")  # 0xC3 0xA9 is 'é'
        for name, ids in (
                ("added token outside the alphabet", [a, think, b]),
                ("added token inside the alphabet", [a, zz, zz]),
                ("special added token", [tool, a, tool, end]),
                ("vocabulary token made special", [a_tilde, copyright_, a]),
                ("all of them", [think, zz, tool, a_tilde, copyright_, end])):
            added_cases.append(case(hf_added, "added: " + name, ids))
        added_vocab_size = len(hf_added)
    finally:
        shutil.rmtree(tmp)

    # tokenizer_config.json settings for clean_up_tokenization.
    clean_text = "Hello . Why ? I 'm here , it 's fine ! don 't ' quote ' , we 're , you 've"
    clean_ids = list(hf(clean_text, add_special_tokens=False)["input_ids"])
    clean_up_cases = []
    force = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
    for config in ({}, {"clean_up_tokenization_spaces": True},
                   {"clean_up_tokenization_spaces": True, force: True}):
        tmp = pathlib.Path(tempfile.mkdtemp())
        try:
            shutil.copy(TOKENIZER / "tokenizer.json", tmp / "tokenizer.json")
            settings = json.loads((TOKENIZER / "tokenizer_config.json").read_text())
            settings.update(config)
            (tmp / "tokenizer_config.json").write_text(json.dumps(settings))
            c = case(AutoTokenizer.from_pretrained(str(tmp)), "clean_up %s" % sorted(config),
                     clean_ids)
            c["config"] = config
            clean_up_cases.append(c)
        finally:
            shutil.rmtree(tmp)

    token_ids = {t: raw.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>", "Ġthe", "a")}
    golden = {
        "about": "decode() of tests/tokenizer/tiny-bpe by transformers %s (tokenizers %s); "
                 "written by tests/tokenizer/make_decode_golden.py"
                 % (transformers.__version__, tokenizers.__version__),
        "vocab_size": len(hf),
        "token_ids": token_ids,
        "cases": cases,
        "added_vocab_size": added_vocab_size,
        "added_tokens": added_tokens,
        "added_cases": added_cases,
        "clean_up_cases": clean_up_cases,
    }
    # One case per line: readable diffs, ids on one line.
    lines = ["{"]
    items = list(golden.items())
    for k, (key, value) in enumerate(items):
        comma = "," if k + 1 < len(items) else ""
        if isinstance(value, list):
            lines.append("  %s: [" % json.dumps(key))
            lines += ["    %s%s" % (json.dumps(v, ensure_ascii=False),
                                     "," if j + 1 < len(value) else "")
                      for j, v in enumerate(value)]
            lines.append("  ]" + comma)
        else:
            lines.append("  %s: %s%s" % (json.dumps(key), json.dumps(value, ensure_ascii=False),
                                         comma))
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == golden
    OUT.write_text(text, encoding="utf-8")
    print("wrote %s (%d + %d + %d cases)" % (OUT, len(cases), len(added_cases),
                                            len(clean_up_cases)))


if __name__ == "__main__":
    main()
