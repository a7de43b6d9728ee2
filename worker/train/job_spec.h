// The job spec: the YAML a user submits (DESIGN.md §5), parsed into typed,
// validated structs. Every field has a default except name, model, data,
// objective and seq_len. Errors are InvalidArgument and read
//   "<source>: <field path>: <reason> (got <value>)"
// e.g. "job.yaml: train.lr: must be a positive number (got -1)". Unknown keys
// at any level are errors (with a "did you mean" suggestion).
//
// Specs also travel as JSON (the coordinator stores them in SQLite); the JSON
// form has the same keys and goes through the same validation.
//
// Hostile input cannot crash or exhaust the reader: the text is at most
// kMaxJobSpecBytes and nested at most kMaxInputNestingDepth levels (both
// checked before parsing), and every number is bounded by what a machine
// could hold or a run could reach (the kMaxSpec* limits below), e.g.
// "job.yaml: train.sequences_per_step: must be at most 1048576 (got
// 1152921504606846977)".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/dtype.h"
#include "worker/engine/engine.h"
#include "worker/engine/lora_options.h"
#include "worker/engine/offload/checkpoint_tier.h"

namespace sbp {

// Largest spec text: a real one is under 2 KiB, and the coordinator takes at
// most 64 KiB. Parsing this much YAML costs at most ~15 MB and 0.2 s.
inline constexpr int64_t kMaxJobSpecBytes = int64_t{64} << 10;
// seq_len, and chunk_tokens / logits_chunk_tokens: 16M tokens. With the
// model's own bounds every activation size stays far inside int64.
inline constexpr int64_t kMaxSpecSeqLen = int64_t{1} << 24;
// train.sequences_per_step and micro_batch_sequences (examples of one step
// are indexed in memory).
inline constexpr int64_t kMaxSpecSequencesPerStep = int64_t{1} << 20;
// train.steps, warmup_steps, epochs, log_every_steps, checkpoint.every_steps
// and keep_last.
inline constexpr int64_t kMaxSpecSteps = 1'000'000'000;
// resources.world_size (the coordinator may allow fewer).
inline constexpr int64_t kMaxSpecWorldSize = 65536;
// max_restarts.
inline constexpr int64_t kMaxSpecRestarts = 1000;
// lora.r.
inline constexpr int64_t kMaxSpecLoraRank = 65536;

enum class Objective { kSft, kDpo, kGrpo };
enum class LrSchedule { kConstant, kLinear, kCosine };
enum class Precision { kFp32, kBf16 };
enum class GrpoLoss { kGrpo, kBnpo, kDrGrpo };
// What to do with an example longer than seq_len: fail the load naming the
// line, or keep its first seq_len tokens.
enum class Truncation { kReject, kTruncate };

absl::string_view ObjectiveName(Objective objective);     // "sft", "dpo", "grpo"
absl::string_view LrScheduleName(LrSchedule schedule);    // "constant", "linear", "cosine"
absl::string_view PrecisionName(Precision precision);     // "fp32", "bf16"
absl::string_view GrpoLossName(GrpoLoss loss);            // "grpo", "bnpo", "dr_grpo"
absl::string_view TruncationName(Truncation truncation);  // "reject", "truncate"

// `streambp.offload:` where the layer inputs kept for the backward live
// (worker/engine/offload/checkpoint_tier.h). `checkpoints: auto` (nullopt)
// lets the planner take the fastest tier that fits the worker; `disk_dir` is
// where the disk tier writes its file, inside the job's area ("": the run
// directory's offload/ folder).
struct OffloadSpec {
  std::optional<CheckpointTier> checkpoints;  // nullopt: auto
  std::string disk_dir;
  bool operator==(const OffloadSpec&) const = default;
};

struct StreamBpSpec {
  BackwardMode mode = BackwardMode::kStream;
  int64_t chunk_tokens = 0;         // 0: auto (the memory planner chooses)
  int64_t logits_chunk_tokens = 0;  // 0: auto
  OffloadSpec offload;
  bool operator==(const StreamBpSpec&) const = default;
};

// One "step" consumes `sequences_per_step` examples of the whole job (all
// ranks together): sequences for SFT, pairs for DPO, groups for GRPO.
struct TrainSpec {
  int64_t steps = 100;
  int64_t sequences_per_step = 8;
  int64_t micro_batch_sequences = 0;  // examples per forward/backward; parse sets
                                      // it to sequences_per_step when omitted
  double lr = 1e-4;
  LrSchedule schedule = LrSchedule::kConstant;
  int64_t warmup_steps = 0;  // linear warmup from 0, then `schedule`
  double min_lr_ratio = 0;   // linear/cosine decay to lr * min_lr_ratio
  double weight_decay = 0;   // AdamW, decoupled
  double beta1 = 0.9;        // YAML also accepts `betas: [b1, b2]`
  double beta2 = 0.999;
  double eps = 1e-8;
  double max_grad_norm = 0;  // global-norm clipping; 0: off
  int64_t seed = 0;          // data order (and anything random in training)
  Precision precision = Precision::kFp32;
  int64_t epochs = 0;   // 0: no limit; otherwise also stop after this many passes
  bool shuffle = true;  // reshuffle the data every epoch (EpochOrder)
  // fp32 gradients, master weights and AdamW moments in host memory, updated
  // by the CPU (ZeRO-Offload style); the device keeps the compute weights and
  // a one-layer gradient cache.
  bool optimizer_offload = false;
  // 2: ZeRO-2 (gradients and optimizer state sharded over the workers, full
  // compute weights on each); 3: ZeRO-3, the compute weights sharded too and
  // all-gathered one parameter group at a time as the engine reads them
  // (worker/dist/sharded_weights.h). Needs world_size > 1; same results.
  int64_t zero_stage = 2;
  bool operator==(const TrainSpec&) const = default;
};

struct DpoSpec {
  double beta = 0.1;
  std::string reference;  // reference model directory; parse sets it to `model` when omitted
  bool operator==(const DpoSpec&) const = default;
};

// Online GRPO's sampling (grpo.rollout): every step samples `group_size`
// completions per prompt from the current weights (worker/engine/decode/).
struct RolloutSpec {
  int64_t group_size = 0;  // 0: offline GRPO (completions come with the data)
  int64_t max_new_tokens = 256;
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;        // nucleus; 1: off
  int64_t top_k = 0;         // 0: off
  // Tokens that end a completion (besides max_new_tokens): `eos_token_id`
  // ids (default: the model's config.json eos_token_id), and token
  // sequences (`stop`), kept in the completion.
  std::vector<int64_t> eos_token_ids;
  bool eos_from_config = true;  // eos_token_ids not given: the model's
  std::vector<std::vector<int64_t>> stop;
  std::string tokenizer;  // directory with tokenizer.json for completion text ("" none)
  bool enabled() const { return group_size > 0; }
  bool operator==(const RolloutSpec&) const = default;
};

// How online GRPO scores a completion (grpo.reward; worker/train/rollout/reward.h):
// a built-in function, or a user program speaking JSON lines.
struct RewardSpec {
  std::string function;                    // math_answer | exact_match | token_match | regex
  std::string reference_field = "answer";  // the prompt line's field compared against
  std::string pattern;                     // regex: reward 1 when the completion text matches
  std::vector<std::string> command;        // a program and its arguments (instead of `function`)
  double timeout_s = 60;                   // the program's wall-clock limit per step
  // DAPO's soft overlong penalty, added to the reward: 0 up to
  // max_new_tokens - length_penalty_buffer tokens, then falling linearly to
  // -length_penalty_weight at max_new_tokens. 0: off.
  int64_t length_penalty_buffer = 0;
  double length_penalty_weight = 1.0;
  bool operator==(const RewardSpec&) const = default;
};

struct GrpoSpec {
  double beta = 0.04;    // weight of the k3 KL to the reference; 0: no reference model
  double epsilon = 0.2;  // ratio clipping: [1 - epsilon, 1 + epsilon]
  GrpoLoss loss = GrpoLoss::kGrpo;
  std::string reference;  // reference model directory; parse sets it to `model` when omitted
  RolloutSpec rollout;    // group_size > 0: online (data holds prompts)
  RewardSpec reward;
  bool online() const { return rollout.enabled(); }
  bool operator==(const GrpoSpec&) const = default;
};

struct ResourcesSpec {
  int64_t world_size = 1;  // workers, gang-scheduled
  DeviceKind device = DeviceKind::kCpu;
  int64_t memory_bytes = 0;  // `memory: 8GiB`: per-worker budget; 0: not given
  // Ulysses sequence parallelism: each group of `sequence_parallel` ranks
  // shares its sequences (each rank holds 1/P of every sequence's tokens);
  // the world_size / sequence_parallel groups are data parallel. Divides
  // world_size; the model's head counts are checked against it where the
  // model is known (CheckSequenceParallel in worker/engine/planner.h).
  int64_t sequence_parallel = 1;
  bool operator==(const ResourcesSpec&) const = default;
};

struct CheckpointSpec {
  int64_t every_steps = 0;  // 0: no periodic checkpoints
  // The run directory; "" (the default): one of its own per job, runs/<job id>
  // (runs/<name> for `sbp train`), so that a new job never resumes another's.
  std::string dir;
  int64_t keep_last = 0;  // 0: keep every checkpoint
  bool operator==(const CheckpointSpec&) const = default;
};

// `eval:` the validation loss: the mean causal-LM loss over the valid
// targets of `data` (SFT token JSONL or shards; the first `max_examples`
// examples in file order, 0: all), computed with the chunked forward (no
// backward memory) after every `every_steps`-th step and after the last one
// (every_steps 0: after the last step only).
struct EvalSpec {
  std::string data;  // "": no validation
  int64_t every_steps = 0;
  int64_t max_examples = 0;
  bool enabled() const { return !data.empty(); }
  bool operator==(const EvalSpec&) const = default;
};

struct JobSpec {
  std::string name;   // [A-Za-z0-9][A-Za-z0-9._-]*, at most 100 characters
  std::string model;  // Hugging Face model directory
  std::string data;   // token JSONL or shards (`data: FILE` or `data: {path: FILE, ...}`)
  // `data: {packing: true}` (SFT): each rank packs its examples of a step
  // greedily, in order, into sequences of at most seq_len tokens, one
  // document per example (worker/train/packing.h).
  bool data_packing = false;
  Objective objective = Objective::kSft;
  int64_t seq_len = 0;  // longest example in tokens (prompt + response)
  Truncation truncation = Truncation::kReject;
  int64_t log_every_steps = 1;
  StreamBpSpec streambp;
  TrainSpec train;
  DpoSpec dpo;
  GrpoSpec grpo;
  ResourcesSpec resources;
  CheckpointSpec checkpoint;
  // `lora:` trains LoRA adapters on a frozen base (lora.r == 0: full
  // fine-tuning). Defaults: alpha = r, every module, rslora false, seed 0.
  LoraOptions lora;
  EvalSpec eval;
  // A checkpoint (or a run directory, meaning its newest checkpoint) that a
  // new job starts from: its weights, optimizer state, step and data
  // position. "" starts from `model`. Retries of a job resume its own run.
  std::string resume_from;
  int64_t max_restarts = 3;  // attempts after the first one fails (lost worker, stall)
  int64_t priority = 0;      // higher runs first; ties are FIFO
  bool operator==(const JobSpec&) const = default;
};

// Every key the parser accepts, as dotted paths in the schema's order:
// the top-level keys ("train"), and "block.key" for every key of every
// block, nested ones included ("streambp.offload.checkpoints"); a block's
// own name is a key too ("grpo.rollout"). docs/job-spec.md documents each
// (tests/worker/train/job_spec_docs_test.cc keeps the two in step).
std::vector<std::string> JobSpecKeys();

// Parses and validates a spec. `source_name` (e.g. "job.yaml") prefixes every
// error message. Never throws.
absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml_text, absl::string_view source_name);

// The text of a spec file: a regular file (never a FIFO or a device) of at
// most kMaxJobSpecBytes, refused by its type and size before it is read.
absl::StatusOr<std::string> ReadJobSpecFile(const std::string& path);

// Checks what the spec points at: the model directory has a config.json, the
// data file exists, and for DPO (and GRPO with beta > 0) the reference model
// directory has a config.json. Relative paths are taken from `base_dir`.
absl::Status ValidateJobSpecFiles(const JobSpec& spec, absl::string_view base_dir);

// `path` when absolute or `base_dir` is empty, else base_dir/path.
std::string ResolveJobPath(absl::string_view base_dir, absl::string_view path);

// Canonical YAML with every field written out; ParseJobSpec(JobSpecToYaml(s)) == s.
std::string JobSpecToYaml(const JobSpec& spec);

// The same document as a JSON object (compact, one line), and back. The JSON
// is validated like YAML; errors name `source_name` ("job.json" by default).
std::string JobSpecToJson(const JobSpec& spec);
absl::StatusOr<JobSpec> JobSpecFromJson(absl::string_view json_text,
                                        absl::string_view source_name = "job.json");

}  // namespace sbp
