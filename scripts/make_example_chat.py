#!/usr/bin/env python3
"""Writes examples/data/tiny-chat.jsonl: chat conversations as users hold them.

Each line is {"messages": [...]}: an optional system message, then one or two
user turns asking to reverse a few words, each answered by the assistant. It
is the input of `sbp data prepare` in the README's data walk-through.
Standard library only; the output is the same on every run.

  python3 scripts/make_example_chat.py [--out examples/data/tiny-chat.jsonl] [--lines 256]
"""
import argparse
import json
import os
import random

WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "stone", "river"]


def turn(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 4))]
    return ([{"role": "user", "content": "Reverse: " + " ".join(words)},
             {"role": "assistant", "content": " ".join(reversed(words))}])


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(root, "examples", "data", "tiny-chat.jsonl"))
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for _ in range(args.lines):
            messages = []
            if rng.random() < 0.5:
                messages.append({"role": "system", "content": "You reverse words."})
            for _ in range(rng.randint(1, 2)):
                messages += turn(rng)
            f.write(json.dumps({"messages": messages}, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}: {args.lines} lines, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
