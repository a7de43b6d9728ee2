"""Writer of the runtime's token shard files (format version 1).

The layout (all integers little-endian; README.md "Token shards" and
worker/train/token_shards.h, which reads it):

  header, 64 bytes
     0  char[8]  magic "SBPSHARD"
     8  u32      version (1)
    12  u32      objective: 0 sft, 1 dpo, 2 grpo
    16  u32      bytes per token id: 2 (uint16) or 4 (uint32)
    20  u32      flags: bit 0 = a logprobs section follows the tokens
    24  u64      examples
    32  u64      spans
    40  u64      tokens
    48  u64[2]   zero
  then, each section starting at a multiple of 8 bytes (zero padding):
    tokens         uint16/uint32 [tokens]
    logprobs       f32 [tokens]            (flag bit 0 only)
    example_spans  u64 [examples + 1]      example i is spans [e[i], e[i+1])
    span_tokens    u64 [spans + 1]         span j is tokens [s[j], s[j+1])
    span_rewards   f64 [spans]             GRPO rewards (0 elsewhere)
    span_kinds     u8  [spans]             what each span is (SPAN_* below)
  and the file ends right after span_kinds.
"""
import array
import os
import struct
import sys

MAGIC = b"SBPSHARD"
VERSION = 1
OBJECTIVES = {"sft": 0, "dpo": 1, "grpo": 2}

# Span kinds. An SFT example is either runs of SPAN_PROMPT (no loss) and
# SPAN_TARGET (loss), or exactly [SPAN_PROMPT, SPAN_COMPLETION] (the
# {"prompt_ids", "completion_ids"} form); DPO is [PROMPT, CHOSEN, REJECTED];
# GRPO is [PROMPT, GRPO_COMPLETION...].
SPAN_PROMPT = 0
SPAN_TARGET = 1
SPAN_COMPLETION = 2
SPAN_CHOSEN = 3
SPAN_REJECTED = 4
SPAN_GRPO_COMPLETION = 5
SPAN_GRPO_COMPLETION_LOGPROBS = 6  # its old_logprobs are in the logprobs section
# (this writer never produces logprobs; the runtime's C++ writer does)

assert sys.byteorder == "little", "the shard writer assumes a little-endian machine"


def _pad(out, position):
    extra = (-position) % 8
    out.write(b"\0" * extra)
    return position + extra


class ShardWriter:
    """Streams examples to `path` (written as path + ".tmp", renamed on close).

    Token ids are uint16 when the vocabulary fits, uint32 otherwise.

    Tokens go to the file as they come; the index (a few bytes per span) is
    kept in memory and written at the end.
    """

    def __init__(self, path, objective, vocab_size):
        self.path = path
        self.objective = objective
        self.token_type = "H" if vocab_size <= 1 << 16 else "I"
        self.tmp = path + ".tmp"
        self.out = open(self.tmp, "wb")
        self.out.write(b"\0" * 64)
        self.example_spans = array.array("Q", [0])
        self.span_tokens = array.array("Q", [0])
        self.span_rewards = array.array("d")
        self.span_kinds = array.array("B")
        self.tokens = 0

    def add(self, spans):
        """spans: [(kind, ids, reward), ...], one example."""
        for kind, ids, reward in spans:
            self.out.write(array.array(self.token_type, ids).tobytes())
            self.tokens += len(ids)
            self.span_tokens.append(self.tokens)
            self.span_rewards.append(float(reward))
            self.span_kinds.append(kind)
        self.example_spans.append(len(self.span_kinds))

    def close(self):
        out = self.out
        token_bytes = 2 if self.token_type == "H" else 4
        _pad(out, 64 + token_bytes * self.tokens)
        for section in (self.example_spans, self.span_tokens, self.span_rewards):
            out.write(section.tobytes())
        out.write(self.span_kinds.tobytes())
        header = struct.pack("<8sIIIIQQQQQ", MAGIC, VERSION, OBJECTIVES[self.objective],
                             token_bytes, 0, len(self.example_spans) - 1, len(self.span_kinds),
                             self.tokens, 0, 0)
        out.seek(0)
        out.write(header)
        out.flush()
        os.fsync(out.fileno())
        out.close()
        os.replace(self.tmp, self.path)

    def abort(self):
        self.out.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)
