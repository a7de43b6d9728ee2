#!/usr/bin/env python3
"""Builds the small test tokenizer in tests/tokenizer/tiny-bpe/.

A Qwen-style byte-level BPE (the Qwen2 pre-tokenizer regex, bytes mapped to
printable characters, ChatML special tokens) trained with the `tokenizers`
library on the project's own Markdown files, 512 ids in all, so that it fits
the tiny example model (examples/models/tiny-chat, vocab_size 512). The
result is committed; rerun this after changing it:

    .venv/bin/python tests/tokenizer/build_tokenizer.py
"""
import json
import pathlib

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "tokenizer" / "tiny-bpe"
VOCAB_SIZE = 512
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The pre-tokenizer split of Qwen2/Qwen3 (and, with a different digit rule, Llama 3).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# ChatML. The {% generation %} block marks what an assistant turn trains on,
# so transformers can return the assistant mask itself
# (apply_chat_template(..., return_assistant_tokens_mask=True)).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] + '<|im_end|>\\n' }}{%- endgeneration %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def training_text():
    files = sorted(p for p in ROOT.glob("*.md")) + sorted((ROOT / "tests").glob("**/*.md"))
    for path in files:
        yield path.read_text(encoding="utf-8")


def main():
    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(training_text(), trainer=trainer)
    assert tokenizer.get_vocab_size() == VOCAB_SIZE, tokenizer.get_vocab_size()
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUT / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 32768,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {OUT} ({tokenizer.get_vocab_size()} ids)")


if __name__ == "__main__":
    main()
