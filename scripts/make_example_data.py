#!/usr/bin/env python3
"""Writes the small example datasets in examples/data/ for the tiny presets.

The task is "reverse the prompt": a prompt is BOS, 7-30 random symbols and SEP;
the answer is the symbols in reverse order, then EOS. A tiny model learns it
visibly within a few hundred steps.

  tiny-sft.jsonl   {"prompt_ids", "completion_ids"}: the correct reversal
  tiny-dpo.jsonl   {"prompt_ids", "chosen_ids", "rejected_ids"}: chosen is the
                   correct reversal, rejected a corrupted one
  tiny-grpo.jsonl  {"prompt_ids", "completions": [{"ids", "reward"}] x 4}:
                   candidates with some tokens wrong; reward = fraction of
                   positions that match the correct answer
  tiny-grpo-prompts.jsonl  {"prompt_ids", "answer"}: prompts of online GRPO
                   (3 symbols of 16..19); answer = the reversal without EOS
                   (rewarded by token_match)

Token ids (vocabulary 256): 1 BOS, 2 SEP, 3 EOS, symbols 16..23.
Standard library only; the output is the same on every run and platform.

  python3 scripts/make_example_data.py [--out-dir examples/data] [--seed 1]

With --long TOKENS it writes instead long-sft.jsonl, the long-context data of
examples/jobs/gpu-sft-32k.yaml (too large to keep in the repository): each
line is a copy task of TOKENS tokens over a Qwen3-sized vocabulary, a prompt
of random tokens (BOS first) and, as the completion, the same tokens again,
so every target needs attention half a sequence back.

  python3 scripts/make_example_data.py --long 32768 [--lines 64]
"""

import argparse
import json
import os
import random

BOS, SEP, EOS = 1, 2, 3
# A small alphabet and short prompts: the tiny preset learns the reversal
# (completion loss about 5.6 -> 0.3) in a few hundred steps.
FIRST_SYMBOL, NUM_SYMBOLS = 16, 8
MIN_LEN, MAX_LEN = 4, 8  # sequences are 2 * len + 3 = 11..19 tokens
LINES = 512
# Online GRPO learns from rewards alone: strings of 3 over the first 4 symbols.
ONLINE_LEN, ONLINE_SYMBOLS = 3, 4
GROUP_SIZE = 4


def symbols(rng, n):
    return [FIRST_SYMBOL + rng.randrange(NUM_SYMBOLS) for _ in range(n)]


def example(rng):
    """(prompt, answer) for one random string."""
    x = symbols(rng, rng.randint(MIN_LEN, MAX_LEN))
    return [BOS] + x + [SEP], x[::-1] + [EOS]


def other_symbol(rng, token):
    while True:
        s = symbols(rng, 1)[0]
        if s != token:
            return s


def corrupt(rng, answer, rate):
    """Replaces each symbol of `answer` (not the EOS) with probability `rate`."""
    out = list(answer)
    for i in range(len(out) - 1):
        if rng.random() < rate:
            out[i] = other_symbol(rng, out[i])
    return out


def rejected_answer(rng, prompt, answer):
    """A plausible wrong answer: the unreversed copy, a few wrong symbols, or a swap."""
    kind = rng.randrange(3)
    x = prompt[1:-1]
    if kind == 0 and x != x[::-1]:
        return x + [EOS]
    if kind == 1 or len(answer) < 3:
        out = list(answer)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(out) - 1)
            out[i] = other_symbol(rng, out[i])
        return out
    out = list(answer)
    i = rng.randrange(len(out) - 2)
    if out[i] == out[i + 1]:
        out[i] = other_symbol(rng, out[i])
    else:
        out[i], out[i + 1] = out[i + 1], out[i]
    return out


def reward(candidate, answer):
    matches = sum(1 for a, b in zip(candidate, answer) if a == b)
    return round(matches / len(answer), 4)


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


# Token ids of the long copy task: inside Qwen3's vocabulary (151,936), above
# its special tokens' range of small ids.
LONG_FIRST_TOKEN, LONG_NUM_TOKENS = 1000, 100000


def write_long_copy_task(path, tokens, lines, seed):
    half = tokens // 2
    rng = random.Random(seed)
    with open(path, "w", encoding="ascii", newline="\n") as f:
        for _ in range(lines):
            prompt = [BOS] + [LONG_FIRST_TOKEN + rng.randrange(LONG_NUM_TOKENS)
                              for _ in range(half - 1)]
            f.write(dumps({"prompt_ids": prompt, "completion_ids": prompt[:tokens - half]}) + "\n")
    print(f"wrote {path}: {lines} lines of {tokens} tokens, {os.path.getsize(path)} bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out-dir", default=os.path.join(root, "examples", "data"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--long", type=int, default=0, metavar="TOKENS",
                        help="write long-sft.jsonl of TOKENS-token copy tasks instead")
    parser.add_argument("--lines", type=int, default=64, help="lines of long-sft.jsonl")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    if args.long:
        write_long_copy_task(os.path.join(args.out_dir, "long-sft.jsonl"), args.long,
                             args.lines, args.seed)
        return

    sft, dpo, grpo = [], [], []
    rng = random.Random(args.seed)
    for _ in range(LINES):
        prompt, answer = example(rng)
        sft.append({"prompt_ids": prompt, "completion_ids": answer})
    rng = random.Random(args.seed + 1)
    for _ in range(LINES):
        prompt, answer = example(rng)
        dpo.append({"prompt_ids": prompt, "chosen_ids": answer,
                    "rejected_ids": rejected_answer(rng, prompt, answer)})
    rng = random.Random(args.seed + 2)
    for _ in range(LINES):
        prompt, answer = example(rng)
        completions = []
        for _ in range(GROUP_SIZE):
            ids = corrupt(rng, answer, rng.choice([0.0, 0.1, 0.3, 0.6, 1.0]))
            completions.append({"ids": ids, "reward": reward(ids, answer)})
        grpo.append({"prompt_ids": prompt, "completions": completions})

    rng = random.Random(args.seed + 3)
    prompts = []
    for _ in range(LINES):
        x = [FIRST_SYMBOL + rng.randrange(ONLINE_SYMBOLS) for _ in range(ONLINE_LEN)]
        prompts.append({"prompt_ids": [BOS] + x + [SEP], "answer": x[::-1]})

    for name, rows in (("tiny-sft.jsonl", sft), ("tiny-dpo.jsonl", dpo),
                       ("tiny-grpo.jsonl", grpo), ("tiny-grpo-prompts.jsonl", prompts)):
        path = os.path.join(args.out_dir, name)
        with open(path, "w", encoding="ascii", newline="\n") as f:
            for row in rows:
                f.write(dumps(row) + "\n")
        print(f"wrote {path}: {len(rows)} lines, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
