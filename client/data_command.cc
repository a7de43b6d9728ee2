#include "client/data_command.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli_common.h"
#include "nlohmann/json.hpp"
#include "worker/train/dataset.h"
#include "worker/train/token_shards.h"

extern char** environ;

namespace sbp::cli {
namespace {

namespace fs = std::filesystem;

constexpr char kToolPath[] = "tools/data_prepare/sbp_data_prepare.py";
constexpr int kExitToolsMissing = 3;

struct PrepareOptions {
  std::string input, tokenizer, out, format;
  bool shards = false, no_eos = false, no_progress = false;
  int64_t max_seq_len = 0, workers = 0;
};

// Trees that may hold the tool: the install prefix (bin/sbp ->
// share/streambp), the build tree (build/bin/sbp -> the checkout) and the
// source tree this binary was built from.
std::vector<fs::path> ToolRoots() {
  std::vector<fs::path> roots;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    roots.push_back(exe.parent_path().parent_path() / "share" / "streambp");
    roots.push_back(exe.parent_path().parent_path().parent_path());
  }
#ifdef SBP_SOURCE_DIR
  roots.push_back(SBP_SOURCE_DIR);
#endif
  return roots;
}

std::string FindPython(const fs::path& root) {
  if (const char* python = std::getenv("SBP_PYTHON"); python != nullptr && *python != '\0') {
    return python;
  }
  for (const char* venv : {".venv-data", ".venv"}) {
    const fs::path python = root / venv / "bin" / "python";
    if (::access(python.c_str(), X_OK) == 0) return python.string();
  }
  return "python3";
}

// Runs argv[0] (searched on PATH), waits, and returns its exit code; -1 with
// `*error` set when it cannot start.
int RunProcess(const std::vector<std::string>& args, std::string* error) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  const int started = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (started != 0) {
    *error = std::strerror(started);
    return -1;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      *error = std::strerror(errno);
      return -1;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int RunPrepare(const PrepareOptions& o) {
  fs::path root;
  for (const fs::path& candidate : ToolRoots()) {
    std::error_code ec;
    if (fs::is_regular_file(candidate / kToolPath, ec)) {
      root = candidate;
      break;
    }
  }
  if (root.empty()) {
    std::fprintf(stderr,
                 "sbp data prepare: %s not found next to this sbp (its build tree or "
                 "share/streambp/)\n",
                 kToolPath);
    return kExitToolsMissing;
  }
  const std::string python = FindPython(root);
  std::vector<std::string> args = {
      python, (root / kToolPath).string(), o.input, "--tokenizer", o.tokenizer, "--out", o.out};
  if (!o.format.empty()) args.insert(args.end(), {"--format", o.format});
  if (o.shards) args.push_back("--shards");
  if (o.max_seq_len > 0) args.insert(args.end(), {"--max-seq-len", std::to_string(o.max_seq_len)});
  if (o.workers > 0) args.insert(args.end(), {"--workers", std::to_string(o.workers)});
  if (o.no_eos) args.push_back("--no-eos");
  if (o.no_progress) args.push_back("--no-progress");
  std::string error;
  const int code = RunProcess(args, &error);
  if (code < 0) {
    std::fprintf(stderr,
                 "sbp data prepare: cannot run Python '%s' (%s); run scripts/bootstrap --python "
                 "(or --data-tools), or point $SBP_PYTHON at a Python with transformers\n",
                 python.c_str(), error.c_str());
    return kExitToolsMissing;
  }
  return code;
}

struct ShardsOptions {
  std::string input, out, objective;
  int64_t vocab_size = 0;
};

int RunShards(const ShardsOptions& o) {
  const Objective objective = o.objective == "dpo"    ? Objective::kDpo
                              : o.objective == "grpo" ? Objective::kGrpo
                                                      : Objective::kSft;
  absl::StatusOr<Dataset> data =
      Dataset::Load(objective, o.input, DataOptions{o.vocab_size, 0, Truncation::kReject});
  if (!data.ok()) return ReportError("data shards", data.status());
  if (data->is_shards()) {
    return ReportError("data shards", absl::InvalidArgumentError(
                                          absl::StrCat(o.input, " is already a token shard file")));
  }
  absl::Status written;
  int64_t tokens = 0;
  for (int64_t i = 0; i < data->size(); ++i) tokens += data->TokenCount(i);
  switch (objective) {
    case Objective::kSft:
      written = WriteTokenShards(o.out, data->sft(), o.vocab_size);
      break;
    case Objective::kDpo:
      written = WriteTokenShards(o.out, data->dpo(), o.vocab_size);
      break;
    case Objective::kGrpo:
      written = WriteTokenShards(o.out, data->grpo(), o.vocab_size);
      break;
  }
  if (!written.ok()) return ReportError("data shards", written);
  std::printf("%s\n", nlohmann::json{{"out", o.out},
                                     {"objective", o.objective},
                                     {"examples", data->size()},
                                     {"tokens", tokens}}
                          .dump()
                          .c_str());
  return kExitOk;
}

}  // namespace

int PrepareTextPrompts(const std::string& tokenizer, const std::string& input,
                       const std::string& out) {
  PrepareOptions o;
  o.input = input;
  o.tokenizer = tokenizer;
  o.out = out;
  o.format = "prompt";
  o.no_progress = true;
  return RunPrepare(o);
}

void AddDataCommand(CLI::App& app, int* exit_code) {
  CLI::App* data = app.add_subcommand("data", "dataset tools: tokenize text, write token shards");
  data->require_subcommand(1);

  auto prepare_options = std::make_shared<PrepareOptions>();
  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "tokenize text/prompt-completion/chat/DPO/GRPO JSONL with a Hugging Face tokenizer into "
      "token JSONL or (--shards) a token shard file");
  prepare->add_option("input", prepare_options->input, "input JSONL")->required();
  prepare->add_option("--tokenizer", prepare_options->tokenizer, "Hugging Face tokenizer directory")
      ->required();
  prepare->add_option("--out", prepare_options->out, "output file")->required();
  prepare
      ->add_option("--format", prepare_options->format,
                   "input shape (default: detected from the first record)")
      ->check(CLI::IsMember({"text", "prompt-completion", "chat", "dpo", "grpo", "prompt"}));
  prepare->add_flag("--shards", prepare_options->shards, "write a token shard file, not JSONL");
  prepare
      ->add_option("--max-seq-len", prepare_options->max_seq_len,
                   "truncate examples to this many tokens (prompts are kept whole)")
      ->check(CLI::NonNegativeNumber);
  prepare->add_option("--workers", prepare_options->workers, "processes (default: every core)")
      ->check(CLI::NonNegativeNumber);
  prepare->add_flag("--no-eos", prepare_options->no_eos,
                    "do not end completions and responses with the EOS token");
  prepare->add_flag("--no-progress", prepare_options->no_progress, "no progress bar on stderr");
  prepare->callback([prepare_options, exit_code] { *exit_code = RunPrepare(*prepare_options); });

  auto shards_options = std::make_shared<ShardsOptions>();
  CLI::App* shards =
      data->add_subcommand("shards", "convert token JSONL into a token shard file (no Python)");
  shards->add_option("input", shards_options->input, "token JSONL")->required();
  shards->add_option("--objective", shards_options->objective, "sft, dpo or grpo")
      ->required()
      ->check(CLI::IsMember({"sft", "dpo", "grpo"}));
  shards
      ->add_option("--vocab-size", shards_options->vocab_size,
                   "every id must be below it (the model's vocab_size)")
      ->required()
      ->check(CLI::PositiveNumber);
  shards->add_option("--out", shards_options->out, "output file")->required();
  shards->callback([shards_options, exit_code] { *exit_code = RunShards(*shards_options); });
}

}  // namespace sbp::cli
