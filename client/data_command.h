// `sbp data`: datasets in the runtime's formats.
//   sbp data prepare --tokenizer DIR [--format F] [--shards] IN.jsonl --out OUT
//       text, prompt/completion, chat, DPO or GRPO JSONL -> token JSONL or a
//       token shard file, through the Hugging Face tokenizer: runs the Python
//       tool tools/data_prepare/sbp_data_prepare.py (found next to this
//       executable's tree or install prefix) with the project's Python
//       ($SBP_PYTHON, else .venv-data/ or .venv/ of that tree, else python3),
//       and exits with its code (0 done, 2 bad input, 3 tools missing);
//   sbp data shards --objective O --vocab-size N IN.jsonl --out OUT
//       token JSONL -> a token shard file, without Python.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddDataCommand(CLI::App& app, int* exit_code);

// Text prompts (`prompt` or chat `messages` lines) -> token prompts
// (`prompt_ids`, other fields kept) at `out`, through the data tool's
// `--format prompt`; returns its exit code (0: written).
int PrepareTextPrompts(const std::string& tokenizer, const std::string& input,
                       const std::string& out);

}  // namespace sbp::cli
