// `sbp generate`: completions of a prompts file from a model (a Hugging Face
// directory or a training checkpoint, optionally with a PEFT LoRA adapter),
// through the engine's KV-cache decoder (worker/engine/decode/). --model and
// --adapter also take a run directory or checkpoints/latest
// (worker/train/checkpoint_argument.h).
//
//   sbp generate --model DIR [--adapter DIR] --prompts FILE --max-new-tokens N
//       [--temperature T --top-p P --top-k K --seed S --samples N]
//       [--tokenizer DIR] [--eos-token-id ID ...] [--ignore-eos] [--stop 1,2,3 ...]
//       [--batch N] [--device cpu|cuda:N] [--precision auto|fp32|bf16] [--out FILE]
//
// Prompts are token JSONL ({"prompt_ids": [...], ...}) or text JSONL
// ({"prompt": "..."} or chat {"messages": [...]}), the latter tokenised by
// the data tool (`sbp data prepare --format prompt`, the Hugging Face
// tokenizer itself) before decoding. Every output line is one completion:
//   {"index", "sample", "prompt_ids", "completion_ids", "logprobs",
//    "finish_reason": "eos"|"stop"|"length", "completion": text (with a
//    tokenizer), and the prompt line's other fields}.
// Text comes from the tokenizer's tokenizer.json (--tokenizer, else the
// model directory's when it has one), decoded in C++
// (worker/model/tokenizer_decoder.h).
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddGenerateCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
