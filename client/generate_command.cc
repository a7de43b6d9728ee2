#include "client/generate_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli_common.h"
#include "client/data_command.h"
#include "client/device_setup.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/engine/decode/generation.h"
#include "worker/engine/device_store.h"
#include "worker/engine/lora_store.h"
#include "worker/model/tokenizer_decoder.h"
#include "worker/train/checkpoint_argument.h"
#include "worker/train/jsonl_data.h"
#include "worker/train/peft_adapter.h"
#include "worker/train/rollout/rollout.h"

namespace sbp::cli {
namespace {

namespace fs = std::filesystem;

struct GenerateOptions {
  std::string model, adapter, prompts, tokenizer, out = "-";
  int64_t max_new_tokens = 256;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int64_t samples = 1;
  std::vector<int64_t> eos_token_ids;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  int64_t batch = 0;
  int64_t prefill_chunk_tokens = 0;
  std::string device = "cpu", precision = "auto";
};

// "1,2,3" -> ids.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--stop: '", text, "' is not a comma-separated list of token ids"));
    }
    ids.push_back(id);
  }
  return ids;
}

// True when the first non-blank line of `path` holds text prompts rather
// than prompt_ids.
bool HoldsTextPrompts(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    return j.is_object() && !j.contains("prompt_ids") &&
           (j.contains("prompt") || j.contains("messages"));
  }
  return false;
}

// The tokenizer directory: --tokenizer, else the model's or the adapter's
// when it has one.
std::string TokenizerDir(const GenerateOptions& o) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  std::error_code ec;
  for (const std::string& dir : {o.model, o.adapter}) {
    if (!dir.empty() && fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec)) return dir;
  }
  return "";
}

// --model and --adapter as checkpoint arguments (a run directory, `latest`);
// a LoRA checkpoint given as --model is the adapter on the base it names.
absl::StatusOr<GenerateOptions> ResolveModelPaths(GenerateOptions o) {
  ASSIGN_OR_RETURN(o.model, ResolveCheckpointArgument("--model", o.model));
  if (!o.adapter.empty()) {
    ASSIGN_OR_RETURN(o.adapter, ResolveCheckpointArgument("--adapter", o.adapter));
  }
  std::error_code ec;
  if (!o.adapter.empty() || fs::exists(fs::path(o.model) / "config.json", ec) ||
      !fs::exists(fs::path(o.model) / "adapter_config.json", ec)) {
    return o;
  }
  ASSIGN_OR_RETURN(const std::string base, ReadPeftBaseModel(o.model));
  if (base.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model: ", o.model,
        " is a LoRA adapter that names no base model: give the base as --model and the "
        "adapter as --adapter"));
  }
  o.adapter = o.model;
  o.model = base;
  return o;
}

absl::StatusOr<GenerationOptions> ToGenerationOptions(const GenerateOptions& o,
                                                      const ModelConfig& config) {
  GenerationOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.sampling = {o.temperature, o.top_p, o.top_k};
  g.max_batch = o.batch;
  if (!o.ignore_eos) {
    const std::vector<int64_t>& eos =
        o.eos_token_ids.empty() ? config.eos_token_ids : o.eos_token_ids;
    g.eos_token_ids.assign(eos.begin(), eos.end());
  }
  for (const std::string& stop : o.stop) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIdList(stop));
    g.stop_sequences.push_back(std::move(ids));
  }
  RETURN_IF_ERROR(CheckGenerationOptions(g, config.vocab_size));
  return g;
}

// Opens `path` for the output ("-": standard output).
class Output {
 public:
  absl::Status Open(const std::string& path) {
    path_ = path;
    if (path == "-") return absl::OkStatus();
    temp_ = absl::StrCat(path, ".tmp.", ::getpid());
    file_.open(temp_, std::ios::binary | std::ios::trunc);
    if (!file_) return absl::InvalidArgumentError(absl::StrCat("--out: cannot write '", path, "'"));
    return absl::OkStatus();
  }
  void Write(const std::string& line) {
    if (path_ == "-") {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
    } else {
      file_ << line << '\n';
    }
  }
  // The whole file appears at once, or not at all.
  absl::Status Commit() {
    if (path_ == "-") return absl::OkStatus();
    file_.close();
    std::error_code ec;
    if (!file_ || (fs::rename(temp_, path_, ec), ec)) {
      fs::remove(temp_, ec);
      return absl::InternalError(absl::StrCat("--out: cannot write '", path_, "'"));
    }
    return absl::OkStatus();
  }
  ~Output() {
    if (!temp_.empty() && file_.is_open()) {
      file_.close();
      std::error_code ec;
      fs::remove(temp_, ec);
    }
  }

 private:
  std::string path_, temp_;
  std::ofstream file_;
};

absl::Status RunGenerate(const GenerateOptions& given) {
  ASSIGN_OR_RETURN(const GenerateOptions o, ResolveModelPaths(given));
  if (o.samples < 1) return absl::InvalidArgumentError("--samples: must be at least 1");
  const std::string tokenizer_dir = TokenizerDir(o);
  std::optional<TokenizerDecoder> tokenizer;
  if (!tokenizer_dir.empty()) {
    absl::StatusOr<TokenizerDecoder> loaded = TokenizerDecoder::Load(tokenizer_dir);
    if (!loaded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--tokenizer: ", loaded.status().message()));
    }
    tokenizer = *std::move(loaded);
  }
  // Text prompts become token prompts through the data tool first.
  std::string prompts_path = o.prompts;
  std::optional<fs::path> tokenised;
  if (HoldsTextPrompts(o.prompts)) {
    if (tokenizer_dir.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompts: '", o.prompts,
                       "' holds text prompts; give --tokenizer DIR (or a model directory with a "
                       "tokenizer.json) to tokenise them"));
    }
    tokenised = fs::temp_directory_path() / absl::StrCat("sbp-generate-", ::getpid(), ".jsonl");
    const int code = PrepareTextPrompts(tokenizer_dir, o.prompts, tokenised->string());
    if (code != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--prompts: tokenising '", o.prompts, "' with the data tool failed (exit ", code, ")"));
    }
    prompts_path = tokenised->string();
  }
  struct Cleanup {
    std::optional<fs::path>& path;
    ~Cleanup() {
      std::error_code ec;
      if (path) fs::remove(*path, ec);
    }
  } cleanup{tokenised};

  ASSIGN_OR_RETURN(ComputeDevice device, OpenCommandDevice(o.device, o.precision));
  Backend& backend = *device.backend;
  ASSIGN_OR_RETURN(DeviceModel model, LoadDeviceModel(device, o.model, "", 0));
  const ModelConfig config = model.weights.config();
  model.grads = ParameterStore();  // decoding keeps no gradients
  RETURN_IF_ERROR(CheckModelRunsOn(config, backend));
  ModelTensors weights = BindModelTensors(model.weights);
  ParameterStore adapters;
  if (!o.adapter.empty()) {
    ASSIGN_OR_RETURN(const LoraOptions lora, ReadPeftAdapterConfig(o.adapter));
    CpuAllocator host_allocator;
    ASSIGN_OR_RETURN(ParameterStore host, CreateLoraStore(config, lora, host_allocator, "adapter"));
    RETURN_IF_ERROR(LoadPeftAdapter(o.adapter, host));
    ASSIGN_OR_RETURN(adapters,
                     CopyStoreToDevice(host, backend, backend.activation_dtype(), "adapter"));
    AttachAdapters(adapters, weights);
  }
  ASSIGN_OR_RETURN(const GenerationOptions options, ToGenerationOptions(o, config));
  ASSIGN_OR_RETURN(const std::vector<RolloutPrompt> prompts,
                   LoadPromptJsonl(prompts_path, DataOptions{config.vocab_size}, 0));

  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int64_t s = 0; s < o.samples; ++s) {
      requests.push_back(
          {prompts[i].prompt, SamplerStream(o.seed, 0, i, static_cast<uint64_t>(s))});
    }
  }
  Output out;
  RETURN_IF_ERROR(out.Open(o.out));
  Decoder decoder(config, backend, o.prefill_chunk_tokens);
  GenerationStats stats;
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const std::vector<Generation> generations,
                   Generate(decoder, weights, std::move(requests), options, &stats));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t n = 0; n < generations.size(); ++n) {
    const size_t i = n / static_cast<size_t>(o.samples);
    const Generation& g = generations[n];
    nlohmann::json line = prompts[i].fields;
    line["index"] = i;
    line["sample"] = n % static_cast<size_t>(o.samples);
    line["prompt_ids"] = prompts[i].prompt;
    line["completion_ids"] = g.ids;
    line["logprobs"] = g.logprobs;
    line["finish_reason"] = FinishReasonName(g.finish);
    if (tokenizer) {
      ASSIGN_OR_RETURN(line["completion"], CompletionText(*tokenizer, g.content(), true));
    }
    out.Write(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  RETURN_IF_ERROR(out.Commit());
  const nlohmann::json summary = {
      {"prompts", prompts.size()},
      {"completions", generations.size()},
      {"prompt_tokens", stats.prompt_tokens},
      {"new_tokens", stats.new_tokens},
      {"seconds", seconds},
      {"prefill_seconds", stats.prefill_seconds},
      {"decode_seconds", stats.decode_seconds},
      {"tokens_per_second", seconds > 0 ? stats.new_tokens / seconds : 0.0},
      {"kv_cache_bytes", stats.kv_cache_bytes},
      {"peak_bytes", device.allocator->peak_bytes()},
      {"device", DeviceName(backend.device())}};
  std::fprintf(stderr, "%s\n", summary.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* g = app.add_subcommand("generate", "sample completions of prompts with a KV cache");
  g->add_option("--model", o->model,
                "Hugging Face model or checkpoint directory, or a run directory (its newest "
                "checkpoint; a LoRA one on the base it names)")
      ->required();
  g->add_option("--adapter", o->adapter,
                "a PEFT LoRA adapter directory (or a LoRA run directory) on top of --model");
  g->add_option("--prompts", o->prompts,
                "JSONL: {\"prompt_ids\": [...]} or text {\"prompt\": ...} / {\"messages\": ...}")
      ->required();
  g->add_option("--max-new-tokens", o->max_new_tokens, "new tokens per completion at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  g->add_option("--temperature", o->temperature, "0: greedy")->capture_default_str();
  g->add_option("--top-p", o->top_p, "nucleus mass (1: off)")->capture_default_str();
  g->add_option("--top-k", o->top_k, "keep the k most likely (0: off)")->capture_default_str();
  g->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  g->add_option("--samples", o->samples, "completions per prompt")->capture_default_str();
  g->add_option("--tokenizer", o->tokenizer,
                "directory with tokenizer.json (default: the model's, when it has one)");
  g->add_option("--eos-token-id", o->eos_token_ids,
                "ids that end a completion (default: the model's eos_token_id)");
  g->add_flag("--ignore-eos", o->ignore_eos, "generate max-new-tokens whatever is sampled");
  g->add_option("--stop", o->stop, "a token sequence that ends a completion, e.g. 151645,198");
  g->add_option("--batch", o->batch, "sequences decoded together (0: all)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--prefill-chunk-tokens", o->prefill_chunk_tokens,
                "prompt rows per prefill chunk (0: auto)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--out", o->out, "completions JSONL ('-': standard output)")->capture_default_str();
  g->add_option("--device", o->device, "cpu or cuda:N")->capture_default_str();
  g->add_option("--precision", o->precision,
                "activation storage: auto (bf16 on CUDA, fp32 on the CPU), fp32 or bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}))
      ->capture_default_str();
  g->callback([o, exit_code] {
    const absl::Status s = RunGenerate(*o);
    *exit_code = s.ok() ? kExitOk : ReportError("generate", s);
  });
}

}  // namespace sbp::cli
