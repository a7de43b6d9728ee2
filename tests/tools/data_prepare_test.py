#!/usr/bin/env python3
"""Tests of `sbp data prepare` (tools/data_prepare) on the shipped tokenizer.

Token ids are checked against the Hugging Face `tokenizers` library applied
directly to tokenizer.json; chat labels against the assistant mask that
transformers itself derives from the template's {% generation %} markers
(a different computation from the tool's prefix rendering). Shards are read
back with an independent parser of the documented layout.

Needs the data tools (scripts/bootstrap --data-tools) and a built sbp (the
CLI path; $SBP_CLI, default build/bin/sbp). .ci/run runs it:
    .venv-data/bin/python tests/tools/data_prepare_test.py
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "data_prepare", "sbp_data_prepare.py")
TOKENIZER = os.path.join(ROOT, "tests", "tokenizer", "tiny-bpe")
SBP = os.environ.get("SBP_CLI", os.path.join(ROOT, "build", "bin", "sbp"))

from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

RAW = Tokenizer.from_file(os.path.join(TOKENIZER, "tokenizer.json"))
HF = AutoTokenizer.from_pretrained(TOKENIZER)
EOS = RAW.token_to_id("<|im_end|>")

TEXTS = ["Hello world!", "StreamBP trains long sequences.\nTwo lines, digits 12345.",
         "  leading spaces and ünïcödé — ✓", "x"]
CHATS = [
    [{"role": "user", "content": "Reverse: red cat"},
     {"role": "assistant", "content": "cat red"}],
    [{"role": "system", "content": "You reverse words."},
     {"role": "user", "content": "Reverse: sun moon"},
     {"role": "assistant", "content": "moon sun"},
     {"role": "user", "content": "And: a b c"},
     {"role": "assistant", "content": "c b a"}],
]


def ids(text):
    return RAW.encode(text, add_special_tokens=False).ids


def run_tool(lines, *args, workers=1, tokenizer=TOKENIZER):
    """(returncode, stdout, stderr, output path) of the tool on `lines`."""
    tmp = tempfile.mkdtemp()
    src = os.path.join(tmp, "in.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    out = os.path.join(tmp, "out")
    p = subprocess.run([sys.executable, TOOL, src, "--tokenizer", tokenizer, "--out", out,
                        "--workers", str(workers), "--no-progress", *args],
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, out, src


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def tokenizer_with_template(change):
    """A copy of the shipped tokenizer whose chat template is change(template)."""
    tmp = tempfile.mkdtemp()
    with open(os.path.join(TOKENIZER, "tokenizer_config.json")) as f:
        config = json.load(f)
    config["chat_template"] = change(config["chat_template"])
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(tmp, "tokenizer.json"), "wb") as f:
        f.write(read_bytes(os.path.join(TOKENIZER, "tokenizer.json")))
    return tmp


def read_shards(path):
    """An independent reader of the layout in tools/data_prepare/token_shards.py."""
    data = read_bytes(path)
    magic, version, objective, token_bytes, flags, examples, spans, tokens = struct.unpack_from(
        "<8sIIIIQQQ", data, 0)
    assert magic == b"SBPSHARD" and version == 1 and flags == 0
    pad = lambda n: (n + 7) // 8 * 8  # noqa: E731
    at = 64
    toks = struct.unpack_from("<%d%s" % (tokens, "H" if token_bytes == 2 else "I"), data, at)
    at = pad(at + tokens * token_bytes)
    example_spans = struct.unpack_from("<%dQ" % (examples + 1), data, at)
    at += 8 * (examples + 1)
    span_tokens = struct.unpack_from("<%dQ" % (spans + 1), data, at)
    at += 8 * (spans + 1)
    rewards = struct.unpack_from("<%dd" % spans, data, at)
    at += 8 * spans
    kinds = data[at:at + spans]
    assert at + spans == len(data)
    out = []
    for e in range(examples):
        out.append([(kinds[j], list(toks[span_tokens[j]:span_tokens[j + 1]]), rewards[j])
                    for j in range(example_spans[e], example_spans[e + 1])])
    return objective, out


class TokenIdsTest(unittest.TestCase):
    def test_text(self):
        code, stdout, err, out, _ = run_tool([{"text": t} for t in TEXTS])
        self.assertEqual(code, 0, err)
        got = read_jsonl(out)
        self.assertEqual([r["input_ids"] for r in got], [ids(t) for t in TEXTS])
        summary = json.loads(stdout)
        self.assertEqual(summary["format"], "text")
        self.assertEqual(summary["examples"], len(TEXTS))
        self.assertEqual(summary["tokens"], sum(len(ids(t)) for t in TEXTS))

    def test_prompt_completion(self):
        rows = [{"prompt": "Q: " + t, "completion": " A: " + t[::-1]} for t in TEXTS]
        code, _, err, out, _ = run_tool(rows)
        self.assertEqual(code, 0, err)
        for row, got in zip(rows, read_jsonl(out)):
            self.assertEqual(got["prompt_ids"], ids(row["prompt"]))
            self.assertEqual(got["completion_ids"], ids(row["completion"]) + [EOS])

    def test_dpo(self):
        rows = [{"prompt": t, "chosen": " good", "rejected": " bad " + t} for t in TEXTS]
        code, stdout, err, out, _ = run_tool(rows)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(stdout)["objective"], "dpo")
        for row, got in zip(rows, read_jsonl(out)):
            self.assertEqual(got["prompt_ids"], ids(row["prompt"]))
            self.assertEqual(got["chosen_ids"], ids(row["chosen"]) + [EOS])
            self.assertEqual(got["rejected_ids"], ids(row["rejected"]) + [EOS])

    def test_grpo(self):
        rows = [{"prompt": t, "completions": [{"text": " one", "reward": 1.0},
                                              {"text": " two " + t, "reward": -0.5}]}
                for t in TEXTS]
        code, stdout, err, out, _ = run_tool(rows)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(stdout)["objective"], "grpo")
        for row, got in zip(rows, read_jsonl(out)):
            self.assertEqual(got["prompt_ids"], ids(row["prompt"]))
            self.assertEqual([c["ids"] for c in got["completions"]],
                             [ids(c["text"]) + [EOS] for c in row["completions"]])
            self.assertEqual([c["reward"] for c in got["completions"]], [1.0, -0.5])

    def test_no_eos(self):
        code, _, err, out, _ = run_tool([{"prompt": "a", "completion": "b"}], "--no-eos")
        self.assertEqual(code, 0, err)
        self.assertEqual(read_jsonl(out)[0]["completion_ids"], ids("b"))


class ChatTest(unittest.TestCase):
    def test_ids_and_assistant_labels(self):
        code, stdout, err, out, _ = run_tool([{"messages": m} for m in CHATS])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(stdout)["format"], "chat")
        for messages, got in zip(CHATS, read_jsonl(out)):
            rendered = HF.apply_chat_template(messages, tokenize=False)
            expected_ids = RAW.encode(rendered, add_special_tokens=False).ids
            self.assertEqual(got["input_ids"], expected_ids)
            # Independent: transformers' own mask from the {% generation %} markers.
            mask = HF.apply_chat_template(messages, tokenize=True, return_dict=True,
                                          return_assistant_tokens_mask=True)["assistant_masks"]
            expected = [i if m else -100 for i, m in zip(expected_ids, mask)]
            self.assertEqual(got["labels"], expected)
            self.assertGreater(sum(mask), 0)
            # Each assistant turn's labels decode to its content and the end of turn.
            trained = RAW.decode([i for i in got["labels"] if i != -100],
                                 skip_special_tokens=False)
            answers = "".join(m["content"] + "<|im_end|>\n" for m in messages
                              if m["role"] == "assistant")
            self.assertEqual(trained, answers)

    def test_template_marking_the_last_turn_uses_its_generation_mask(self):
        # The end-of-text token after the last message only: a prefix of the
        # conversation renders differently from the whole.
        tmp = tokenizer_with_template(lambda t: t + "{{- '<|endoftext|>' }}")
        marked = AutoTokenizer.from_pretrained(tmp)
        code, _, err, out, _ = run_tool([{"messages": CHATS[1]}], tokenizer=tmp)
        self.assertEqual(code, 0, err)
        got = read_jsonl(out)[0]
        r = marked.apply_chat_template(CHATS[1], tokenize=True, return_dict=True,
                                       return_assistant_tokens_mask=True)
        self.assertEqual(got["input_ids"], list(r["input_ids"]))
        self.assertEqual(got["labels"],
                         [i if m else -100 for i, m in zip(r["input_ids"], r["assistant_masks"])])
        # Without the markers the line is refused, naming the problem.
        tmp = tokenizer_with_template(lambda t: t.replace("{%- generation %}", "").replace(
            "{%- endgeneration %}", "") + "{{- '<|endoftext|>' }}")
        code, _, err, _, src = run_tool([{"messages": CHATS[1]}], tokenizer=tmp)
        self.assertEqual(code, 2)
        self.assertIn(src + ":1: the chat template renders the conversation", err)

    def test_conversation_without_assistant_is_dropped(self):
        rows = [{"messages": CHATS[0]}, {"messages": CHATS[0][:1]}]
        code, stdout, err, out, _ = run_tool(rows)
        self.assertEqual(code, 0, err)
        summary = json.loads(stdout)
        self.assertEqual((summary["examples"], summary["dropped"]), (1, 1))
        self.assertEqual(len(read_jsonl(out)), 1)


class ShardsTest(unittest.TestCase):
    def test_shards_hold_the_jsonl_examples(self):
        rows = [{"messages": m} for m in CHATS]
        code, _, err, jsonl, _ = run_tool(rows)
        self.assertEqual(code, 0, err)
        code, _, err, shard, _ = run_tool(rows, "--shards")
        self.assertEqual(code, 0, err)
        objective, examples = read_shards(shard)
        self.assertEqual(objective, 0)
        for spans, row in zip(examples, read_jsonl(jsonl)):
            self.assertEqual(sum((s[1] for s in spans), []), row["input_ids"])
            labels = sum((s[1] if s[0] == 1 else [-100] * len(s[1]) for s in spans), [])
            self.assertEqual(labels, row["labels"])

    def test_grpo_shards_keep_rewards(self):
        rows = [{"prompt": "p", "completions": [{"text": "a", "reward": 0.25},
                                                {"text": "b", "reward": 2}]}]
        code, _, err, shard, _ = run_tool(rows, "--shards")
        self.assertEqual(code, 0, err)
        objective, examples = read_shards(shard)
        self.assertEqual(objective, 2)
        self.assertEqual([(k, r) for k, _, r in examples[0]], [(0, 0.0), (5, 0.25), (5, 2.0)])


class OptionsTest(unittest.TestCase):
    def test_max_seq_len_truncates_and_drops(self):
        long = "word " * 40
        rows = [{"prompt": "short", "completion": long}, {"prompt": long, "completion": "x"},
                {"prompt": "ok", "completion": "y"}]
        code, stdout, err, out, _ = run_tool(rows, "--max-seq-len", "8")
        self.assertEqual(code, 0, err)
        summary = json.loads(stdout)
        self.assertEqual((summary["examples"], summary["truncated"], summary["dropped"]),
                         (2, 1, 1))
        got = read_jsonl(out)
        self.assertEqual(got[0]["prompt_ids"], ids("short"))
        self.assertEqual(len(got[0]["prompt_ids"]) + len(got[0]["completion_ids"]), 8)

    def test_workers_keep_the_order(self):
        rows = [{"text": "line %d %s" % (i, "z" * (i % 7))} for i in range(300)]
        code, _, err, one, _ = run_tool(rows, workers=1)
        self.assertEqual(code, 0, err)
        code, _, err, many, _ = run_tool(rows, workers=3)
        self.assertEqual(code, 0, err)
        self.assertEqual(read_bytes(one), read_bytes(many))

    def test_malformed_lines_name_file_and_line(self):
        for rows, message in (
                ([{"text": "a"}, "{not json"], ":2: not valid JSON"),
                ([{"text": "a"}, {"text": 3}], ":2: field 'text' must be a string, got int"),
                ([{"messages": [{"role": "user"}]}], ":1: messages[0] must be an object"),
                ([{"prompt": "p", "completions": [{"text": "a", "reward": "high"}]}],
                 ":1: completions[0].reward must be a finite number"),
                ([{"messages": [{"role": "user", "content": "{{ 1 }}"}]}, {"messages": 5}],
                 ":2: field 'messages' must be a non-empty list"),
                ([{"unknown": 1}], "cannot tell the format")):
            code, _, err, out, src = run_tool(rows)
            self.assertEqual(code, 2, err)
            self.assertIn(message, err)
            self.assertFalse(os.path.exists(out), "nothing half-written")
            if message.startswith(":"):
                self.assertIn(src + message, err)

    def test_template_errors_name_the_line(self):
        tmp = tokenizer_with_template(
            lambda t: "{%- if messages[0]['role'] != 'user' %}"
                      "{{ raise_exception('the first message must be a user') }}"
                      "{%- endif %}" + t)
        code, _, err, out, src = run_tool([{"messages": CHATS[0]}, {"messages": CHATS[1]}],
                                          tokenizer=tmp)
        self.assertEqual(code, 2, err)
        self.assertIn(src + ":2: cannot tokenize it:", err)
        self.assertIn("the first message must be a user", err)
        self.assertFalse(os.path.exists(out))

    def test_format_can_be_forced(self):
        code, _, err, _, src = run_tool([{"prompt": "p", "completion": "c"}], "--format", "text")
        self.assertEqual(code, 2)
        self.assertIn(src + ":1: missing field 'text'", err)


class PromptTest(unittest.TestCase):
    """--format prompt: prompts for online GRPO, other fields copied through."""

    def test_text_prompts_copy_the_other_fields(self):
        rows = [{"prompt": t, "answer": str(i), "tests": [{"in": [1, 2], "out": "3"}],
                 "meta": {"source": "gsm8k", "note": "naïve ✓", "score": 0.5, "none": None}}
                for i, t in enumerate(TEXTS)]
        code, stdout, err, out, _ = run_tool(rows, "--format", "prompt")
        self.assertEqual(code, 0, err)
        summary = json.loads(stdout)
        self.assertEqual((summary["format"], summary["objective"]), ("prompt", "grpo"))
        self.assertEqual(summary["examples"], len(rows))
        self.assertEqual(summary["tokens"], sum(len(ids(t)) for t in TEXTS))
        self.assertEqual(summary["loss_tokens"], 0)
        got = read_jsonl(out)
        for row, record in zip(rows, got):
            # prompt_ids first, then every other field in its input order.
            self.assertEqual(list(record), ["prompt_ids", "answer", "tests", "meta"])
            self.assertEqual(record["prompt_ids"], ids(row["prompt"]))
            self.assertEqual({k: v for k, v in record.items() if k != "prompt_ids"},
                             {k: v for k, v in row.items() if k != "prompt"})
            self.assertEqual(RAW.decode(record["prompt_ids"], skip_special_tokens=False),
                             row["prompt"])

    def test_messages_get_the_generation_prompt(self):
        conversations = [CHATS[0][:1], CHATS[1][:2], CHATS[1][:4]]
        rows = [{"messages": m, "solution": "s%d" % i} for i, m in enumerate(conversations)]
        rows.append({"prompt": "plain text", "solution": "t"})  # the shapes may mix
        code, _, err, out, _ = run_tool(rows, "--format", "prompt")
        self.assertEqual(code, 0, err)
        got = read_jsonl(out)
        for messages, record in zip(conversations, got):
            rendered = HF.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            self.assertTrue(rendered.endswith("<|im_start|>assistant\n"), rendered)
            self.assertEqual(record["prompt_ids"],
                             RAW.encode(rendered, add_special_tokens=False).ids)
        self.assertEqual([r["solution"] for r in got], ["s0", "s1", "s2", "t"])
        self.assertEqual(got[3]["prompt_ids"], ids("plain text"))
        self.assertNotIn("messages", got[0])

    def test_workers_keep_the_order(self):
        rows = [{"prompt": "question %d %s" % (i, "z" * (i % 5)), "answer": i} for i in range(200)]
        code, _, err, one, _ = run_tool(rows, "--format", "prompt", workers=1)
        self.assertEqual(code, 0, err)
        code, _, err, many, _ = run_tool(rows, "--format", "prompt", workers=3)
        self.assertEqual(code, 0, err)
        self.assertEqual(read_bytes(one), read_bytes(many))
        self.assertEqual([r["answer"] for r in read_jsonl(one)], list(range(200)))

    def test_max_seq_len_drops_longer_prompts(self):
        long = "word " * 40
        exact = "a b c d e f g"  # exactly --max-seq-len tokens: kept (nothing is generated here)
        self.assertEqual(len(ids(exact)), 7)
        rows = [{"prompt": long, "answer": 1}, {"prompt": "ok", "answer": 2},
                {"prompt": exact, "answer": 3}, {"prompt": exact + " h", "answer": 4},
                {"prompt": "", "answer": 5}]
        code, stdout, err, out, _ = run_tool(rows, "--format", "prompt", "--max-seq-len", "7")
        self.assertEqual(code, 0, err)
        summary = json.loads(stdout)
        self.assertEqual((summary["examples"], summary["truncated"], summary["dropped"]), (2, 0, 3))
        self.assertEqual(read_jsonl(out), [{"prompt_ids": ids("ok"), "answer": 2},
                                           {"prompt_ids": ids(exact), "answer": 3}])

    def test_bad_records_name_the_line(self):
        for rows, message in (
                ([{"prompt": "p"}, {"prompt": "q", "prompt_ids": [1]}],
                 ":2: field 'prompt_ids' is the output's name for the tokenized prompt"),
                ([{"prompt": "p", "messages": CHATS[0][:1]}],
                 ":1: has both 'prompt' and 'messages'"),
                ([{"prompt": "p"}, {"answer": "a"}], ":2: missing field 'prompt' (or 'messages')"),
                ([{"prompt": ["p"]}], ":1: field 'prompt' must be a string, got list"),
                ([{"messages": []}], ":1: field 'messages' must be a non-empty list"),
                ([{"messages": [{"role": "user", "content": 3}]}],
                 ":1: messages[0] must be an object with string 'role' and 'content'"),
                (['{"prompt": "p", "answer": NaN}'],
                 ":1: field 'answer' holds NaN or Infinity"),
                (['{"prompt": "p", "tests": [1, {"x": -Infinity}]}'],
                 ":1: field 'tests' holds NaN or Infinity"),
                (['{"prompt": "p", "answer": "\\ud800"}'],
                 ":1: field 'answer' holds a lone UTF-16 surrogate"),
                (["[1, 2]"], ":1: expected a JSON object, got list")):
            code, _, err, out, src = run_tool(rows, "--format", "prompt")
            self.assertEqual(code, 2, err)
            self.assertIn(src + message, err)
            self.assertFalse(os.path.exists(out), "nothing half-written")

    def test_messages_need_a_chat_template(self):
        tmp = tokenizer_with_template(lambda t: None)
        code, _, err, out, src = run_tool([{"prompt": "fine"}, {"messages": CHATS[0][:1]}],
                                          "--format", "prompt", tokenizer=tmp)
        self.assertEqual(code, 2, err)
        self.assertIn(src + ":2: field 'messages' needs a chat template", err)
        self.assertFalse(os.path.exists(out))

    def test_only_when_named_and_only_jsonl(self):
        code, _, err, out, _ = run_tool([{"prompt": "p", "answer": "a"}])
        self.assertEqual(code, 2)
        self.assertIn("'prompt' but no 'completion'; for prompts alone (online GRPO) pass "
                      "--format prompt", err)
        self.assertFalse(os.path.exists(out))
        code, _, err, out, _ = run_tool([{"prompt": "p"}], "--format", "prompt", "--shards")
        self.assertEqual(code, 2)
        self.assertIn("--format prompt writes JSONL only", err)
        self.assertFalse(os.path.exists(out))


class CliTest(unittest.TestCase):
    """`sbp data prepare` finds the tool and runs it with this Python."""

    def test_cli_forwards_to_the_tool(self):
        self.assertTrue(os.access(SBP, os.X_OK), "build sbp first (or set $SBP_CLI): " + SBP)
        tmp = tempfile.mkdtemp()
        out = os.path.join(tmp, "chat.shard")
        env = dict(os.environ, SBP_PYTHON=sys.executable)
        p = subprocess.run([SBP, "data", "prepare", "--tokenizer", TOKENIZER, "--shards",
                            os.path.join(ROOT, "examples", "data", "tiny-chat.jsonl"),
                            "--out", out, "--no-progress"], capture_output=True, text=True,
                           env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        # The committed example was written by this tool from the same input.
        self.assertEqual(read_bytes(out),
                         read_bytes(os.path.join(ROOT, "examples", "data", "tiny-chat.shard")))
        p = subprocess.run([SBP, "data", "prepare", "--tokenizer", TOKENIZER,
                            os.path.join(tmp, "missing.jsonl"), "--out", out],
                           capture_output=True, text=True, env=env)
        self.assertEqual(p.returncode, 2)
        self.assertIn("missing.jsonl: no such file", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
