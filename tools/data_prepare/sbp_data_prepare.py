#!/usr/bin/env python3
"""sbp data prepare: text and chat JSONL -> the runtime's token data.

Tokenizes with the Hugging Face tokenizer exactly as `transformers` applies
it (AutoTokenizer; apply_chat_template for chat) and writes token JSONL
(DESIGN.md section 5, worker/train/jsonl_data.h) or, with --shards, one token
shard file (token_shards.py). Input shapes, one JSON object per line:

  text               {"text": "..."}                  -> {"input_ids"}
  prompt-completion  {"prompt": "...", "completion": "..."}
                                                      -> {"prompt_ids", "completion_ids"}
  chat               {"messages": [{"role", "content"}, ...]}
                                                      -> {"input_ids", "labels"}, loss on
                                                         the assistant turns only
  dpo                {"prompt", "chosen", "rejected"} -> {"prompt_ids", "chosen_ids",
                                                          "rejected_ids"}
  grpo               {"prompt", "completions": [{"text", "reward"}, ...]}
                                                      -> {"prompt_ids", "completions":
                                                          [{"ids", "reward"}]}
  prompt             {"prompt": "..."} or {"messages": [...]}, plus any other fields
                                                      -> {"prompt_ids", the other fields}

The format is detected from the first record unless --format names it;
`prompt` (prompts for online GRPO, whose completions the runtime generates) is
used only when named. Its `messages` are rendered by the chat template with
the generation prompt (add_generation_prompt=True); its other fields
("answer", "solution", "tests", ...) are copied to the output unchanged for
the reward functions; it is written as JSONL only (no --shards), and
--max-seq-len bounds the prompt alone (longer ones are dropped; pass the job's
seq_len less its rollout max_new_tokens).

Completions, chosen and rejected responses end with the tokenizer's EOS token
(--no-eos leaves it out); text gets what the tokenizer itself adds. An
assistant turn's labels cover what the template renders for it after the
"assistant" header (its content and end-of-turn tokens), found by rendering
each conversation prefix with the template (so any template works whose
rendering of a prefix is a prefix of the whole).

Lines are tokenized on every core (order kept) with a progress bar on stderr;
a summary line of JSON goes to stdout. Exit codes: 0 done, 2 bad input or
usage (the message names file:line and the problem), 3 tools missing.
"""
import argparse
import json
import multiprocessing
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import token_shards  # noqa: E402

FORMATS = ("text", "prompt-completion", "chat", "dpo", "grpo", "prompt")
OBJECTIVE_OF = {"text": "sft", "prompt-completion": "sft", "chat": "sft", "dpo": "dpo",
                "grpo": "grpo", "prompt": "grpo"}
# Fields of a `prompt` record that are tokenized rather than copied.
PROMPT_SOURCES = ("prompt", "messages")
IGNORE = -100
GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")
EXIT_BAD_INPUT = 2
EXIT_MISSING_TOOLS = 3


class BadInput(Exception):
    pass


def detect_format(record):
    if "messages" in record:
        return "chat"
    if "completions" in record:
        return "grpo"
    if "chosen" in record or "rejected" in record:
        return "dpo"
    if "prompt" in record and "completion" not in record:
        raise BadInput("the first record has 'prompt' but no 'completion'; for prompts alone "
                       "(online GRPO) pass --format prompt")
    if "prompt" in record or "completion" in record:
        return "prompt-completion"
    if "text" in record:
        return "text"
    fields = ", ".join(sorted(record)) or "none"
    raise BadInput("cannot tell the format from the first record (fields: %s); expected "
                   "text, prompt+completion, messages, prompt+chosen+rejected or "
                   "prompt+completions, or pass --format" % fields)


# ---------------------------------------------------------------------------
# Tokenizing (in the worker processes)

_tokenizer = None
_options = None


def _init_worker(tokenizer_dir, options):
    global _tokenizer, _options
    from transformers import AutoTokenizer
    _tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    _options = options


def _string(record, field):
    if field not in record:
        raise BadInput("missing field '%s'" % field)
    value = record[field]
    if not isinstance(value, str):
        raise BadInput("field '%s' must be a string, got %s" % (field, type(value).__name__))
    return value


def _ids(text, special):
    return list(_tokenizer(text, add_special_tokens=special)["input_ids"])


def _response(text):
    ids = _ids(text, False)
    if _options["eos"] and _tokenizer.eos_token_id is not None:
        ids.append(_tokenizer.eos_token_id)
    return ids


def _template_ids(messages, generation_prompt):
    out = _tokenizer.apply_chat_template(messages, tokenize=True,
                                         add_generation_prompt=generation_prompt)
    if hasattr(out, "keys"):  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    return list(out)


class _PrefixMismatch(Exception):
    pass


def _prefix_spans(messages, ids):
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        if i == 0:
            raise BadInput("messages[0] is an assistant turn; a conversation starts with a "
                           "system or user message")
        start = _template_ids(messages[:i], True)
        end = _template_ids(messages[:i + 1], False)
        for prefix, what in ((start, "up to"), (end, "through")):
            if ids[:len(prefix)] != prefix:
                raise _PrefixMismatch("the chat template renders the conversation %s "
                                      "messages[%d] differently from the whole conversation"
                                      % (what, i))
        spans.append((len(start), len(end)))
    return spans


def _mask_spans(messages):
    """Spans from the template's own {% generation %} markers."""
    out = _tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)
    spans, start = [], None
    for t, m in enumerate(list(out["assistant_masks"]) + [0]):
        if m and start is None:
            start = t
        elif not m and start is not None:
            spans.append((start, t))
            start = None
    return spans


def _check_messages(messages):
    if not isinstance(messages, list) or not messages:
        raise BadInput("field 'messages' must be a non-empty list of {role, content} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or \
                not isinstance(m.get("content"), str):
            raise BadInput("messages[%d] must be an object with string 'role' and 'content'" % i)


def chat_spans(messages):
    """(ids, [(start, end), ...]): the conversation and its assistant spans.

    Each assistant turn runs from the end of the conversation before it
    rendered with the generation prompt to the end of the conversation through
    it. A template whose prefixes do not render as prefixes of the whole
    (one that marks the last turn, say) is asked for its {% generation %}
    mask instead; without one, the line is refused.
    """
    _check_messages(messages)
    ids = _template_ids(messages, False)
    try:
        return ids, _prefix_spans(messages, ids)
    except _PrefixMismatch as e:
        if not GENERATION_TAG.search(_tokenizer.chat_template or ""):
            raise BadInput("%s, so the assistant tokens cannot be located (a template with "
                           "{%% generation %%} markers can be used instead)" % e)
    return ids, _mask_spans(messages)


def encode(record, fmt):
    """[(kind, ids, reward), ...] for one example, before any truncation."""
    if not isinstance(record, dict):
        raise BadInput("expected a JSON object, got %s" % type(record).__name__)
    if fmt == "text":
        return [(token_shards.SPAN_TARGET, _ids(_string(record, "text"), True), 0.0)]
    if fmt == "prompt-completion":
        return [(token_shards.SPAN_PROMPT, _ids(_string(record, "prompt"), True), 0.0),
                (token_shards.SPAN_COMPLETION, _response(_string(record, "completion")), 0.0)]
    if fmt == "chat":
        if "messages" not in record:
            raise BadInput("missing field 'messages'")
        ids, assistant = chat_spans(record["messages"])
        spans, at = [], 0
        for start, end in assistant:
            if start > at:
                spans.append((token_shards.SPAN_PROMPT, ids[at:start], 0.0))
            if end > start:
                spans.append((token_shards.SPAN_TARGET, ids[start:end], 0.0))
            at = max(at, end)
        if at < len(ids):
            spans.append((token_shards.SPAN_PROMPT, ids[at:], 0.0))
        return spans
    if fmt == "dpo":
        return [(token_shards.SPAN_PROMPT, _ids(_string(record, "prompt"), True), 0.0),
                (token_shards.SPAN_CHOSEN, _response(_string(record, "chosen")), 0.0),
                (token_shards.SPAN_REJECTED, _response(_string(record, "rejected")), 0.0)]
    if fmt == "grpo":
        spans = [(token_shards.SPAN_PROMPT, _ids(_string(record, "prompt"), True), 0.0)]
        completions = record.get("completions")
        if not isinstance(completions, list) or not completions:
            raise BadInput("field 'completions' must be a non-empty list of {text, reward}")
        for i, c in enumerate(completions):
            if not isinstance(c, dict) or not isinstance(c.get("text"), str):
                raise BadInput("completions[%d] must be an object with a string 'text'" % i)
            reward = c.get("reward")
            if isinstance(reward, bool) or not isinstance(reward, (int, float)) or \
                    reward != reward or reward in (float("inf"), float("-inf")):
                raise BadInput("completions[%d].reward must be a finite number" % i)
            spans.append((token_shards.SPAN_GRPO_COMPLETION, _response(c["text"]), float(reward)))
        return spans
    if fmt == "prompt":
        return [(token_shards.SPAN_PROMPT, prompt_ids(record), 0.0)]
    raise AssertionError(fmt)


def prompt_ids(record):
    """The tokens of a `prompt` record: its text, or its conversation rendered
    with the generation prompt that the completion will follow."""
    if "prompt_ids" in record:
        raise BadInput("field 'prompt_ids' is the output's name for the tokenized prompt; "
                       "rename the input field")
    if "prompt" in record and "messages" in record:
        raise BadInput("has both 'prompt' and 'messages'; give one of them")
    if "messages" in record:
        _check_messages(record["messages"])
        if not _tokenizer.chat_template:
            raise BadInput("field 'messages' needs a chat template, and the tokenizer has none "
                           "(tokenizer_config.json 'chat_template' or chat_template.jinja)")
        return _template_ids(record["messages"], True)
    if "prompt" not in record:
        raise BadInput("missing field 'prompt' (or 'messages')")
    return _ids(_string(record, "prompt"), True)


def passthrough(record, fmt):
    """The fields copied to the output unchanged (`prompt` records only)."""
    if fmt != "prompt":
        return None
    extra = {k: v for k, v in record.items() if k not in PROMPT_SOURCES}
    for key, value in extra.items():
        try:
            json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800"
            raise BadInput("field '%s' holds a lone UTF-16 surrogate, which is not text" % key)
        except ValueError:
            raise BadInput("field '%s' holds NaN or Infinity, which JSON output cannot carry"
                           % key)
    return extra


def limit(spans, fmt, max_len):
    """Applies --max-seq-len: (spans, truncated) or (None, reason) to drop."""
    if max_len <= 0:
        return spans, False
    if fmt in ("text", "chat"):
        kept, total = [], 0
        for kind, ids, reward in spans:
            room = max_len - total
            if room <= 0:
                break
            kept.append((kind, ids[:room], reward))
            total += min(room, len(ids))
        return kept, total < sum(len(s[1]) for s in spans)
    prompt = spans[0]
    if fmt == "prompt":  # the runtime generates the completion: the limit is the prompt's
        if len(prompt[1]) > max_len:
            return None, "prompt has %d tokens, over --max-seq-len %d" % (len(prompt[1]), max_len)
        return spans, False
    # Prompt first, each response cut to what is left.
    room = max_len - len(prompt[1])
    if room <= 0:
        return None, "prompt has %d tokens, no room within --max-seq-len %d" % (
            len(prompt[1]), max_len)
    out = [prompt] + [(k, ids[:room], r) for k, ids, r in spans[1:]]
    return out, any(len(ids) > room for _, ids, _ in spans[1:])


def empty_reason(spans, fmt):
    if fmt in ("text", "chat"):
        if not any(s[1] for s in spans):
            return "no tokens"
        if not any(k == token_shards.SPAN_TARGET and ids for k, ids, _ in spans):
            return "no token with a loss (no assistant turn)" if fmt == "chat" else "no tokens"
        return None
    for kind, ids, _ in spans:
        if not ids:
            return "an empty %s" % ("prompt" if kind == token_shards.SPAN_PROMPT else "response")
    return None


def process_batch(batch):
    """[(line number, text)] -> [(line number, spans | None, truncated, error, extra)].

    `extra` holds the fields a `prompt` record copies through (None otherwise).
    """
    out = []
    fmt, max_len = _options["format"], _options["max_seq_len"]
    for number, text in batch:
        try:
            try:
                record = json.loads(text)
            except ValueError as e:
                raise BadInput("not valid JSON: %s" % e)
            spans = encode(record, fmt)
            extra = passthrough(record, fmt)
            spans, truncated = limit(spans, fmt, max_len)
            if spans is None:
                out.append((number, None, False, truncated, None))
                continue
            reason = empty_reason(spans, fmt)
            out.append((number, None if reason else spans, truncated, reason, extra))
        except BadInput as e:
            out.append((number, "error", False, str(e), None))
        except Exception as e:  # a template's raise_exception, a tokenizer error, ...
            out.append((number, "error", False, "cannot tokenize it: %s: %s"
                        % (type(e).__name__, e), None))
    return out


# ---------------------------------------------------------------------------
# Output

def jsonl_record(spans, fmt, extra=None):
    if fmt == "prompt":
        record = {"prompt_ids": spans[0][1]}
        record.update(extra or {})
        return record
    if fmt == "text":
        return {"input_ids": spans[0][1]}
    if fmt == "chat":
        ids, labels = [], []
        for kind, span, _ in spans:
            ids += span
            labels += span if kind == token_shards.SPAN_TARGET else [IGNORE] * len(span)
        return {"input_ids": ids, "labels": labels}
    if fmt == "prompt-completion":
        return {"prompt_ids": spans[0][1], "completion_ids": spans[1][1]}
    if fmt == "dpo":
        return {"prompt_ids": spans[0][1], "chosen_ids": spans[1][1], "rejected_ids": spans[2][1]}
    return {"prompt_ids": spans[0][1],
            "completions": [{"ids": ids, "reward": r} for _, ids, r in spans[1:]]}


class JsonlWriter:
    def __init__(self, path, fmt):
        self.path, self.fmt = path, fmt
        self.tmp = path + ".tmp"
        self.out = open(self.tmp, "w", encoding="utf-8")

    def add(self, spans, extra=None):
        self.out.write(json.dumps(jsonl_record(spans, self.fmt, extra), separators=(",", ":"),
                                  ensure_ascii=False, allow_nan=False) + "\n")

    def close(self):
        self.out.flush()
        os.fsync(self.out.fileno())
        self.out.close()
        os.replace(self.tmp, self.path)

    def abort(self):
        self.out.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)


# ---------------------------------------------------------------------------
# Driver

def read_batches(path, stream, progress, batch_lines):
    batch = []
    number = 0
    for raw in stream:
        number += 1
        progress.update(len(raw))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadInput("%s:%d: not UTF-8 text (%s)" % (path, number, e))
        if number == 1:
            text = text.lstrip("\ufeff")
        if not text.strip():
            continue
        batch.append((number, text))
        if len(batch) == batch_lines:
            yield batch
            batch = []
    if batch:
        yield batch


def first_record(path):
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
            if text.strip():
                try:
                    return number, json.loads(text)
                except ValueError as e:
                    raise BadInput("%s:%d: not valid JSON: %s" % (path, number, e))
    raise BadInput("%s: no records (the file is empty or has only blank lines)" % path)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="sbp data prepare",
        description="Tokenize text, prompt/completion, chat, DPO or GRPO JSONL, or prompts "
                    "for online GRPO, into the runtime's token JSONL or token shards.")
    p.add_argument("input", help="input JSONL")
    p.add_argument("--tokenizer", required=True,
                   help="Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json)")
    p.add_argument("--out", required=True, help="output file (token JSONL, or shards)")
    p.add_argument("--format", choices=FORMATS,
                   help="input shape (default: from the first record; 'prompt' only when named)")
    p.add_argument("--shards", action="store_true", help="write a token shard file, not JSONL")
    p.add_argument("--max-seq-len", type=int, default=0,
                   help="truncate examples to this many tokens (prompts are kept whole)")
    p.add_argument("--no-eos", dest="eos", action="store_false",
                   help="do not end completions and responses with the EOS token")
    p.add_argument("--workers", type=int, default=0, help="processes (default: every core)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar on stderr")
    return p.parse_args(argv)


class _NoProgress:
    def update(self, n):
        pass

    def close(self):
        pass


def run(args):
    # Only the tokenizer is used: no notice that PyTorch is absent.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        sys.stderr.write("sbp data prepare: the Python package 'transformers' is missing (%s); "
                         "run scripts/bootstrap --python (or --data-tools)\n" % e)
        return EXIT_MISSING_TOOLS
    if not os.path.isfile(args.input):
        raise BadInput("%s: no such file" % args.input)
    if not os.path.isdir(args.tokenizer):
        raise BadInput("--tokenizer %s: not a directory" % args.tokenizer)
    if args.max_seq_len < 0:
        raise BadInput("--max-seq-len must be >= 0")
    _, record = first_record(args.input)
    if not isinstance(record, dict) and not args.format:
        raise BadInput("%s: the first record is not a JSON object" % args.input)
    fmt = args.format or detect_format(record)
    if fmt == "prompt" and args.shards:
        raise BadInput("--format prompt writes JSONL only: token shards cannot carry the "
                       "records' other fields (leave out --shards)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    except Exception as e:  # the tokenizer library raises many types
        raise BadInput("--tokenizer %s: cannot load it: %s" % (args.tokenizer, e))
    if fmt == "chat" and not tokenizer.chat_template:
        raise BadInput("--tokenizer %s has no chat template (tokenizer_config.json "
                       "'chat_template' or chat_template.jinja)" % args.tokenizer)
    vocab = max(len(tokenizer), tokenizer.vocab_size)
    options = {"format": fmt, "max_seq_len": args.max_seq_len, "eos": args.eos}
    objective = OBJECTIVE_OF[fmt]
    writer = (token_shards.ShardWriter(args.out, objective, vocab) if args.shards
              else JsonlWriter(args.out, fmt))
    stats = {"format": fmt, "objective": objective, "examples": 0, "tokens": 0,
             "loss_tokens": 0, "truncated": 0, "dropped": 0}
    progress = _NoProgress()
    if args.progress:
        from tqdm import tqdm
        progress = tqdm(total=os.path.getsize(args.input), unit="B", unit_scale=True,
                        desc="prepare", file=sys.stderr, mininterval=0.5)
    workers = args.workers or os.cpu_count() or 1
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # processes parallelize, not threads
    pool = None
    try:
        with open(args.input, "rb") as stream:
            batches = read_batches(args.input, stream, progress, 64)
            if workers == 1:
                _init_worker(args.tokenizer, options)
                results = map(process_batch, batches)
            else:
                pool = multiprocessing.get_context("fork").Pool(
                    workers, initializer=_init_worker, initargs=(args.tokenizer, options))
                results = pool.imap(process_batch, batches, chunksize=4)
            for batch in results:
                for number, spans, truncated, reason, extra in batch:
                    if spans == "error":
                        raise BadInput("%s:%d: %s" % (args.input, number, reason))
                    if spans is None:
                        stats["dropped"] += 1
                        continue
                    if extra is None:
                        writer.add(spans)
                    else:
                        writer.add(spans, extra)
                    stats["examples"] += 1
                    stats["truncated"] += int(truncated)
                    stats["tokens"] += sum(len(ids) for _, ids, _ in spans)
                    stats["loss_tokens"] += sum(
                        len(ids) for kind, ids, _ in spans if kind != token_shards.SPAN_PROMPT)
        if stats["examples"] == 0:
            raise BadInput("%s: every record was dropped (empty or no room); nothing written"
                           % args.input)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        progress.close()
        if pool is not None:
            pool.terminate()
    stats["out"] = args.out
    stats["shards"] = bool(args.shards)
    print(json.dumps(stats))
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except BadInput as e:
        sys.stderr.write("sbp data prepare: %s\n" % e)
        return EXIT_BAD_INPUT
    except OSError as e:
        sys.stderr.write("sbp data prepare: %s\n" % e)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
