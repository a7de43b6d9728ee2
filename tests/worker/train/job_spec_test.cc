#include "worker/train/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/worker/train/test_util.h"
#include "worker/train/run_directory.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using train_testing::MakeTempDir;
using train_testing::WriteFile;

// The example of DESIGN.md §5.
constexpr char kDesignExample[] = R"yaml(
name: tiny-sft
model: examples/models/tiny-qwen3       # Hugging Face directory
data: examples/data/tiny-sft.jsonl
objective: sft                          # sft | dpo | grpo
seq_len: 4096
streambp: {mode: stream, chunk_tokens: auto, logits_chunk_tokens: auto}
train: {steps: 100, sequences_per_step: 8, lr: 1.0e-4, schedule: cosine,
        warmup_steps: 10, weight_decay: 0.0, max_grad_norm: 1.0, seed: 1, precision: fp32}
dpo: {beta: 0.1, reference: examples/models/tiny-qwen3}
grpo: {beta: 0.04, epsilon: 0.2, loss: grpo}
resources: {world_size: 2, device: cpu}
checkpoint: {every_steps: 50, dir: runs/tiny-sft}
max_restarts: 3
priority: 0
)yaml";

constexpr char kMinimal[] = "name: job\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 64\n";

JobSpec MustParse(absl::string_view yaml) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

TEST(JobSpecTest, DesignExampleParses) {
  const JobSpec s = MustParse(kDesignExample);
  EXPECT_EQ(s.name, "tiny-sft");
  EXPECT_EQ(s.model, "examples/models/tiny-qwen3");
  EXPECT_EQ(s.data, "examples/data/tiny-sft.jsonl");
  EXPECT_EQ(s.objective, Objective::kSft);
  EXPECT_EQ(s.seq_len, 4096);
  EXPECT_EQ(s.truncation, Truncation::kReject);
  EXPECT_EQ(s.streambp.mode, BackwardMode::kStream);
  EXPECT_EQ(s.streambp.chunk_tokens, 0);
  EXPECT_EQ(s.streambp.logits_chunk_tokens, 0);
  EXPECT_EQ(s.train.steps, 100);
  EXPECT_EQ(s.train.sequences_per_step, 8);
  EXPECT_EQ(s.train.micro_batch_sequences, 8);
  EXPECT_DOUBLE_EQ(s.train.lr, 1e-4);
  EXPECT_EQ(s.train.schedule, LrSchedule::kCosine);
  EXPECT_EQ(s.train.warmup_steps, 10);
  EXPECT_EQ(s.train.weight_decay, 0.0);
  EXPECT_EQ(s.train.max_grad_norm, 1.0);
  EXPECT_EQ(s.train.seed, 1);
  EXPECT_EQ(s.train.precision, Precision::kFp32);
  EXPECT_EQ(s.train.beta1, 0.9);
  EXPECT_EQ(s.train.beta2, 0.999);
  EXPECT_EQ(s.train.eps, 1e-8);
  EXPECT_EQ(s.train.min_lr_ratio, 0.0);
  EXPECT_TRUE(s.train.shuffle);
  EXPECT_EQ(s.dpo.beta, 0.1);
  EXPECT_EQ(s.dpo.reference, "examples/models/tiny-qwen3");
  EXPECT_EQ(s.grpo.beta, 0.04);
  EXPECT_EQ(s.grpo.epsilon, 0.2);
  EXPECT_EQ(s.grpo.loss, GrpoLoss::kGrpo);
  EXPECT_EQ(s.grpo.reference, "examples/models/tiny-qwen3");
  EXPECT_EQ(s.resources.world_size, 2);
  EXPECT_EQ(s.resources.device, DeviceKind::kCpu);
  EXPECT_EQ(s.resources.memory_bytes, 0);
  EXPECT_EQ(s.checkpoint.every_steps, 50);
  EXPECT_EQ(s.checkpoint.dir, "runs/tiny-sft");
  EXPECT_EQ(s.checkpoint.keep_last, 0);
  EXPECT_EQ(s.max_restarts, 3);
  EXPECT_EQ(s.priority, 0);
}

TEST(JobSpecTest, DefaultsFillDependentFields) {
  const JobSpec s = MustParse(kMinimal);
  EXPECT_EQ(s.train.micro_batch_sequences, s.train.sequences_per_step);
  EXPECT_EQ(s.dpo.reference, "m");
  EXPECT_EQ(s.grpo.reference, "m");
  EXPECT_TRUE(s.checkpoint.dir.empty());  // one run directory per job, chosen by the trainer
  EXPECT_EQ(s.resources.world_size, 1);
  EXPECT_EQ(s.streambp.mode, BackwardMode::kStream);
  // Null values and empty blocks mean "default".
  const JobSpec t = MustParse(absl::StrCat(kMinimal, "train:\ndpo:\ngrpo: {}\nmax_restarts:\n"));
  EXPECT_EQ(s, t);
}

TEST(JobSpecTest, ReadsEveryOptionalForm) {
  const std::string yaml = absl::StrReplaceAll(absl::StrCat(kMinimal, R"yaml(truncation: truncate
log_every_steps: 5
streambp: {mode: checkpoint, chunk_tokens: 16, logits_chunk_tokens: 32}
train:
  steps: 7
  sequences_per_step: 6
  micro_batch_sequences: 2
  lr: 3e-3
  schedule: linear
  min_lr_ratio: 0.1
  betas: [0.8, 0.95]
  eps: 1.0e-6
  seed: 42
  epochs: 3
  shuffle: false
  precision: bf16
dpo: {beta: 0.5, reference: ref}
grpo: {loss: dr_grpo, beta: 0}
resources: {world_size: 3, device: cuda, memory: 8GiB}
checkpoint: {every_steps: 10, dir: out/ck, keep_last: 2}
priority: -5
)yaml"),
                                               {{"objective: sft", "objective: dpo"}});
  const JobSpec t = MustParse(yaml);
  EXPECT_EQ(t.objective, Objective::kDpo);
  EXPECT_EQ(t.truncation, Truncation::kTruncate);
  EXPECT_EQ(t.log_every_steps, 5);
  EXPECT_EQ(t.streambp.mode, BackwardMode::kCheckpoint);
  EXPECT_EQ(t.streambp.chunk_tokens, 16);
  EXPECT_EQ(t.streambp.logits_chunk_tokens, 32);
  EXPECT_EQ(t.train.steps, 7);
  EXPECT_EQ(t.train.micro_batch_sequences, 2);
  EXPECT_EQ(t.train.lr, 3e-3);
  EXPECT_EQ(t.train.schedule, LrSchedule::kLinear);
  EXPECT_EQ(t.train.min_lr_ratio, 0.1);
  EXPECT_EQ(t.train.beta1, 0.8);
  EXPECT_EQ(t.train.beta2, 0.95);
  EXPECT_EQ(t.train.eps, 1e-6);
  EXPECT_EQ(t.train.seed, 42);
  EXPECT_EQ(t.train.epochs, 3);
  EXPECT_FALSE(t.train.shuffle);
  EXPECT_EQ(t.train.precision, Precision::kBf16);
  EXPECT_EQ(t.dpo.beta, 0.5);
  EXPECT_EQ(t.dpo.reference, "ref");
  EXPECT_EQ(t.grpo.loss, GrpoLoss::kDrGrpo);
  EXPECT_EQ(t.grpo.beta, 0.0);
  EXPECT_EQ(t.resources.world_size, 3);
  EXPECT_EQ(t.resources.device, DeviceKind::kCuda);
  EXPECT_EQ(t.resources.memory_bytes, int64_t{8} << 30);
  EXPECT_EQ(t.checkpoint.every_steps, 10);
  EXPECT_EQ(t.checkpoint.dir, "out/ck");
  EXPECT_EQ(t.checkpoint.keep_last, 2);
  EXPECT_EQ(t.priority, -5);
}

struct ErrorCase {
  std::string yaml;      // appended to kMinimal unless `whole`
  std::string fragment;  // expected in the message
  bool whole = false;
};

class JobSpecErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(JobSpecErrorTest, NamesSourceFieldAndReason) {
  const ErrorCase& c = GetParam();
  const std::string yaml = c.whole ? c.yaml : absl::StrCat(kMinimal, c.yaml);
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_FALSE(spec.ok()) << yaml;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr(c.fragment)) << yaml;
  EXPECT_THAT(std::string(spec.status().message()), ::testing::StartsWith("job.yaml: "));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, JobSpecErrorTest,
    ::testing::Values(
        ErrorCase{"train: {lr: -1}\n", "job.yaml: train.lr: must be a positive number (got -1)"},
        ErrorCase{"train: {lr: fast}\n", "job.yaml: train.lr: must be a number (got 'fast')"},
        ErrorCase{"streambp: {mode: fast}\n",
                  "job.yaml: streambp.mode: must be one of stream, checkpoint, full (got 'fast')"},
        ErrorCase{"streambp: {offload: {checkpoints: nvme}}\n",
                  "job.yaml: streambp.offload.checkpoints: must be auto, device, host or disk "
                  "(got 'nvme')"},
        ErrorCase{"streambp: {offload: {checkpoints: host, disk_dir: scratch}}\n",
                  "job.yaml: streambp.offload.disk_dir: is where the disk tier writes; "
                  "streambp.offload.checkpoints is host"},
        ErrorCase{"streambp: {offload: {tier: host}}\n",
                  "job.yaml: streambp.offload: unknown key 'tier'"},
        ErrorCase{"streambp: {offload: host}\n", "job.yaml: streambp.offload: must be a mapping"},
        ErrorCase{"train: {optimizer_offload: maybe}\n", "train.optimizer_offload"},
        ErrorCase{"trian: {steps: 1}\n", "job.yaml: unknown key 'trian' (did you mean 'train'?)"},
        ErrorCase{"train: {stpes: 1}\n",
                  "job.yaml: train: unknown key 'stpes' (did you mean 'steps'?)"},
        ErrorCase{"lr: 0.1\n", "job.yaml: unknown key 'lr' (did you mean 'train.lr'?)"},
        ErrorCase{"zzzzzz: 1\n", "job.yaml: unknown key 'zzzzzz' (expected one of name, model"},
        ErrorCase{"train: {steps: ten}\n", "job.yaml: train.steps: must be an integer (got 'ten')"},
        ErrorCase{"train: {steps: 1.5}\n", "train.steps: must be an integer (got 1.5)"},
        ErrorCase{"train: {steps: 0}\n", "train.steps: must be a positive integer (got 0)"},
        ErrorCase{"train: {warmup_steps: -2}\n",
                  "train.warmup_steps: must be a non-negative integer (got -2)"},
        ErrorCase{"seq_len: [1]\n", "job.yaml: duplicate key 'seq_len'"},
        ErrorCase{"name: j\nmodel: m\ndata: d\nobjective: sft\n",
                  "job.yaml: missing required field 'seq_len'", true},
        ErrorCase{"model: m\ndata: d\nobjective: sft\nseq_len: 8\n",
                  "job.yaml: missing required field 'name'", true},
        ErrorCase{"name: j\ndata: d\nobjective: sft\nseq_len: 8\n",
                  "job.yaml: missing required field 'model'", true},
        ErrorCase{"name: j\nmodel: m\nobjective: sft\nseq_len: 8\n",
                  "job.yaml: missing required field 'data'", true},
        ErrorCase{"name: j\nmodel: m\ndata: d\nseq_len: 8\n",
                  "job.yaml: missing required field 'objective'", true},
        ErrorCase{"name: j\nmodel: m\ndata: d\nobjective: ppo\nseq_len: 8\n",
                  "job.yaml: objective: must be one of sft, dpo, grpo (got 'ppo')", true},
        ErrorCase{"name: j\nmodel: m\ndata: d\nobjective: sft\nseq_len: -8\n",
                  "job.yaml: seq_len: must be a positive integer (got -8)", true},
        ErrorCase{"name: my job\nmodel: m\ndata: d\nobjective: sft\nseq_len: 8\n",
                  "job.yaml: name: must start with a letter or digit", true},
        ErrorCase{"name: j\nmodel: [a, b]\ndata: d\nobjective: sft\nseq_len: 8\n",
                  "job.yaml: model: must be a string (got a list)", true},
        ErrorCase{"name: j\nmodel: ''\ndata: d\nobjective: sft\nseq_len: 8\n",
                  "job.yaml: model: must not be empty", true},
        ErrorCase{"streambp: {chunk_tokens: big}\n",
                  "job.yaml: streambp.chunk_tokens: must be 'auto' or a positive integer (got "
                  "'big')"},
        ErrorCase{"streambp: {logits_chunk_tokens: 0}\n",
                  "streambp.logits_chunk_tokens: must be 'auto' or a positive integer (got 0)"},
        ErrorCase{"train: 5\n", "job.yaml: train: must be a mapping (got 5)"},
        ErrorCase{"- a\n- b\n", "job.yaml: the job spec must be a mapping of fields (got a list)",
                  true},
        ErrorCase{"", "job.yaml: the job spec is empty", true},
        ErrorCase{"# only a comment\n", "job.yaml: the job spec is empty", true},
        ErrorCase{"---\n", "job.yaml: the job spec is empty", true},
        ErrorCase{"---\nname: a\n---\nname: b\n", "job.yaml: expected one YAML document, found 2",
                  true},
        ErrorCase{"name: j\nmodel: [a\ndata: d\n", "job.yaml: line ", true},
        ErrorCase{"train: {lr: 1\n", "invalid YAML", true},
        ErrorCase{"train: {schedule: step}\n",
                  "train.schedule: must be one of constant, linear, cosine (got 'step')"},
        ErrorCase{"train: {min_lr_ratio: 2}\n", "train.min_lr_ratio: must be a number in [0, 1]"},
        ErrorCase{"train: {beta2: 1}\n", "train.beta2: must be a number in [0, 1) (got 1)"},
        ErrorCase{"train: {betas: [0.9]}\n",
                  "train.betas: must be a list of two numbers [beta1, beta2] (got a list)"},
        ErrorCase{"train: {betas: [0.9, 1.5]}\n",
                  "train.betas[1]: must be a number in [0, 1) (got 1.5)"},
        ErrorCase{"train: {betas: [0.9, 0.99], beta1: 0.8}\n",
                  "train.betas: give either betas or beta1/beta2, not both"},
        ErrorCase{"train: {eps: 0}\n", "train.eps: must be a positive number (got 0)"},
        ErrorCase{"train: {lr: .inf}\n", "train.lr: must be a number (got '.inf')"},
        ErrorCase{"train: {lr: nan}\n", "train.lr: must be a number (got 'nan')"},
        ErrorCase{"train: {shuffle: maybe}\n",
                  "train.shuffle: must be true or false (got 'maybe')"},
        ErrorCase{"train: {precision: fp8}\n",
                  "train.precision: must be one of fp32, bf16 (got 'fp8')"},
        ErrorCase{"train: {precision: bf16}\n", "train.precision: bf16 needs resources.device"},
        ErrorCase{"train: {sequences_per_step: 4, micro_batch_sequences: 5}\n",
                  "train.micro_batch_sequences: must be at most train.sequences_per_step (4) "
                  "(got 5)"},
        ErrorCase{"train: {steps: 10, warmup_steps: 11}\n",
                  "train.warmup_steps: must be at most train.steps (10) (got 11)"},
        ErrorCase{"train: {sequences_per_step: 2}\nresources: {world_size: 4}\n",
                  "train.sequences_per_step: must be at least resources.world_size (4)"},
        ErrorCase{"dpo: {beta: 0}\n", "dpo.beta: must be a positive number (got 0)"},
        ErrorCase{"dpo: {referense: x}\n",
                  "job.yaml: dpo: unknown key 'referense' (did you mean 'reference'?)"},
        ErrorCase{"grpo: {loss: ppo}\n",
                  "grpo.loss: must be one of grpo, bnpo, dr_grpo (got "
                  "'ppo')"},
        ErrorCase{"grpo: {epsilon: -0.1}\n", "grpo.epsilon: must be a positive number (got -0.1)"},
        ErrorCase{"resources: {device: tpu}\n",
                  "resources.device: must be one of cpu, cuda (got 'tpu')"},
        ErrorCase{"resources: {world_size: 0}\n",
                  "resources.world_size: must be a positive integer (got 0)"},
        ErrorCase{"resources: {world_size: 4, sequence_parallel: 3}\n",
                  "job.yaml: resources.sequence_parallel: must divide resources.world_size (4) "
                  "into groups of ranks that share a sequence (got 3)"},
        ErrorCase{"resources: {sequence_parallel: 2}\n",
                  "resources.sequence_parallel: must divide resources.world_size (1)"},
        ErrorCase{"resources: {world_size: 2, sequence_parallel: 0}\n",
                  "resources.sequence_parallel: must be a positive integer (got 0)"},
        ErrorCase{"resources: {world_size: 2, sequence_parallel: two}\n",
                  "resources.sequence_parallel: must be an integer (got 'two')"},
        ErrorCase{"resources: {world_size: 2, sequence_paralel: 2}\n",
                  "resources: unknown key 'sequence_paralel' (did you mean "
                  "'sequence_parallel'?)"},
        ErrorCase{"train: {sequences_per_step: 1}\nresources: {world_size: 8, "
                  "sequence_parallel: 4}\n",
                  "train.sequences_per_step: must be at least resources.world_size / "
                  "resources.sequence_parallel (2) so that every group of ranks gets an example "
                  "(got 1)"},
        ErrorCase{"resources: {memory: lots}\n",
                  "resources.memory: must be a positive byte size such as 8GiB or 512MiB (got "
                  "'lots')"},
        ErrorCase{"checkpoint: {keep_last: -1}\n",
                  "checkpoint.keep_last: must be a non-negative integer (got -1)"},
        ErrorCase{"checkpoint: {name: x}\n",
                  "job.yaml: checkpoint: unknown key 'name' ('name' belongs at the top level)"},
        ErrorCase{"max_restarts: -1\n", "max_restarts: must be a non-negative integer (got -1)"},
        ErrorCase{"priority: high\n", "priority: must be an integer (got 'high')"},
        ErrorCase{"log_every_steps: 0\n", "log_every_steps: must be a positive integer (got 0)"},
        ErrorCase{"eval: {every_steps: 5}\n",
                  "job.yaml: eval: missing required field 'data' (the validation token file)"},
        ErrorCase{"eval: {data: v.jsonl, every_steps: -5}\n",
                  "eval.every_steps: must be a non-negative integer (got -5)"},
        ErrorCase{"eval: {data: v.jsonl, max_exmaples: 5}\n",
                  "eval: unknown key 'max_exmaples' (did you mean 'max_examples'?)"},
        ErrorCase{"name: j\nmodel: m\ndata: d\nobjective: dpo\nseq_len: 8\neval: {data: v}\n",
                  "job.yaml: eval: the validation loss is the causal-LM loss of SFT data; "
                  "objective dpo has no eval",
                  true}));

TEST(JobSpecTest, SourceNameMayBeEmpty) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(absl::StrCat(kMinimal, "train: {lr: -1}\n"), "");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "train.lr: must be a positive number (got -1)");
}

TEST(JobSpecTest, SyntaxErrorHasLineAndColumn) {
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec("name: j\nmodel: m\ntrain: {lr: 1, steps: [}\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("job.yaml: line 3, column "));
  EXPECT_THAT(spec.status().message(), HasSubstr("invalid YAML"));
}

TEST(JobSpecTest, GarbageNeverThrows) {
  const std::vector<std::string> inputs = {
      "{{{",
      "\t\tx",
      "key: [",
      "- - -",
      "a: b: c",
      std::string("\xff\xfe\x00\x01", 4),
      "&a [*a]",
      "name: *undefined",
      "? [a, b]\n: c\n",
      "!!binary x",
      "[[[[[[[[[[[[[[[[",
      "name: j\nmodel: m\ndata: d\nobjective: sft\nseq_len: 99999999999999999999999\n",
      "name: j\nmodel: m\ndata: d\nobjective: sft\nseq_len: 8\nresources: {memory: -1GiB}\n",
      "name: j\nmodel: m\ndata: d\nobjective: sft\nseq_len: 8\n[a]: b\n"};
  for (const std::string& text : inputs) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "job.yaml");
    EXPECT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  }
}

JobSpec CustomSpec() {
  JobSpec s = MustParse(kDesignExample);
  s.name = "custom.job_1";
  s.model = "null";            // YAML would read a plain `null` as nothing
  s.data = "dir: x/#d.jsonl";  // characters that need quoting
  s.objective = Objective::kGrpo;
  s.truncation = Truncation::kTruncate;
  s.log_every_steps = 3;
  s.streambp = {BackwardMode::kFull, 16, 48, {CheckpointTier::kDisk, "scratch/nvme 1"}};
  s.train.optimizer_offload = true;
  s.train.lr = 0.1 + 0.2;  // not a short decimal
  s.train.micro_batch_sequences = 3;
  s.train.schedule = LrSchedule::kLinear;
  s.train.min_lr_ratio = 1.0 / 3.0;
  s.train.beta1 = 0.85;
  s.train.eps = 1e-12;
  s.train.seed = 1234567890123;
  s.train.precision = Precision::kBf16;
  s.train.epochs = 2;
  s.train.shuffle = false;
  s.dpo = {0.25, "/abs/ref model"};
  s.grpo = {0.0, 0.28, GrpoLoss::kBnpo, "grpo-ref"};
  s.resources = {2, DeviceKind::kCuda, (int64_t{3} << 30) + 5};
  s.resources.sequence_parallel = 2;
  s.checkpoint = {7, "runs/x y", 4};
  s.max_restarts = 0;
  s.priority = -3;
  return s;
}

TEST(JobSpecTest, YamlRoundTrip) {
  for (const JobSpec& s : {MustParse(kDesignExample), MustParse(kMinimal), CustomSpec()}) {
    const std::string yaml = JobSpecToYaml(s);
    absl::StatusOr<JobSpec> back = ParseJobSpec(yaml, "round.yaml");
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
    EXPECT_EQ(*back, s) << yaml;
    EXPECT_EQ(JobSpecToYaml(*back), yaml);
  }
}

TEST(JobSpecTest, EvalReadsAndRoundTrips) {
  const JobSpec s = MustParse(absl::StrCat(
      kMinimal, "eval: {data: val/held-out.jsonl, every_steps: 5, max_examples: 100}\n"));
  EXPECT_EQ(s.eval, (EvalSpec{"val/held-out.jsonl", 5, 100}));
  EXPECT_EQ(MustParse(absl::StrCat(kMinimal, "eval: {data: v.jsonl}\n")).eval,
            (EvalSpec{"v.jsonl", 0, 0}));
  EXPECT_FALSE(MustParse(kMinimal).eval.enabled());
  EXPECT_EQ(*ParseJobSpec(JobSpecToYaml(s), "round.yaml"), s);
  EXPECT_EQ(*JobSpecFromJson(JobSpecToJson(s)), s);
  EXPECT_THAT(JobSpecToYaml(MustParse(kMinimal)), Not(HasSubstr("eval")));
}

TEST(JobSpecTest, OffloadReadsAndDefaultsToAuto) {
  const JobSpec s =
      MustParse(absl::StrCat(kMinimal, "streambp: {offload: {checkpoints: disk, disk_dir: nvme}}\n",
                             "train: {optimizer_offload: true}\n"));
  EXPECT_EQ(s.streambp.offload.checkpoints, CheckpointTier::kDisk);
  EXPECT_EQ(s.streambp.offload.disk_dir, "nvme");
  EXPECT_TRUE(s.train.optimizer_offload);
  const JobSpec d = MustParse(kMinimal);
  EXPECT_FALSE(d.streambp.offload.checkpoints.has_value());  // auto
  EXPECT_FALSE(d.train.optimizer_offload);
  EXPECT_THAT(JobSpecToYaml(d), HasSubstr("checkpoints: auto"));
  // auto with a disk_dir: the directory for when auto picks the disk.
  EXPECT_EQ(MustParse(absl::StrCat(kMinimal, "streambp: {offload: {disk_dir: nvme}}\n"))
                .streambp.offload.disk_dir,
            "nvme");
  EXPECT_EQ(*JobSpecFromJson(JobSpecToJson(s)), s);
}

TEST(JobSpecTest, SequenceParallelReadsAndRoundTrips) {
  const JobSpec s = MustParse(absl::StrCat(
      kMinimal,
      "train: {sequences_per_step: 2}\nresources: {world_size: 8, sequence_parallel: 4}\n"));
  EXPECT_EQ(s.resources.world_size, 8);
  EXPECT_EQ(s.resources.sequence_parallel, 4);
  EXPECT_EQ(*ParseJobSpec(JobSpecToYaml(s), "round.yaml"), s);
  EXPECT_EQ(*JobSpecFromJson(JobSpecToJson(s)), s);
  EXPECT_THAT(JobSpecToYaml(s), HasSubstr("sequence_parallel: 4"));
  // One group of P ranks shares every sequence: one sequence a step is enough.
  EXPECT_EQ(MustParse(absl::StrCat(kMinimal,
                                   "train: {sequences_per_step: 1}\n"
                                   "resources: {world_size: 8, sequence_parallel: 8}\n"))
                .resources.sequence_parallel,
            8);
  // The default is 1 and is not written out, so that the spec hash of a job
  // without sequence parallelism stays what it was.
  const JobSpec d = MustParse(kMinimal);
  EXPECT_EQ(d.resources.sequence_parallel, 1);
  EXPECT_THAT(JobSpecToYaml(d), Not(HasSubstr("sequence_parallel")));
  EXPECT_THAT(JobSpecToJson(d), Not(HasSubstr("sequence_parallel")));
  EXPECT_EQ(MustParse(absl::StrCat(kMinimal, "resources: {sequence_parallel: 1}\n")), d);
  // P changes the arithmetic (how the sequence is split and rounded), so a
  // run never resumes under another P.
  JobSpec two = MustParse(absl::StrCat(kMinimal, "resources: {world_size: 4}\n"));
  const std::string without = TrajectoryHash(two);
  two.resources.sequence_parallel = 2;
  EXPECT_NE(TrajectoryHash(two), without);
}

TEST(JobSpecTest, YamlKeepsDesignOrderAndAuto) {
  const std::string yaml = JobSpecToYaml(MustParse(kDesignExample));
  EXPECT_LT(yaml.find("name:"), yaml.find("model:"));
  EXPECT_LT(yaml.find("streambp:"), yaml.find("train:"));
  EXPECT_THAT(yaml, HasSubstr("chunk_tokens: auto"));
  EXPECT_THAT(yaml, HasSubstr("schedule: cosine"));
}

TEST(JobSpecTest, JsonRoundTrip) {
  for (const JobSpec& s : {MustParse(kDesignExample), MustParse(kMinimal), CustomSpec()}) {
    const std::string json = JobSpecToJson(s);
    EXPECT_EQ(json.find('\n'), std::string::npos);
    absl::StatusOr<JobSpec> back = JobSpecFromJson(json);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
    EXPECT_EQ(*back, s) << json;
    EXPECT_EQ(JobSpecToJson(*back), json);
  }
  EXPECT_THAT(JobSpecToJson(CustomSpec()), HasSubstr("\"memory\":\"3221225477\""));
  EXPECT_THAT(JobSpecToJson(MustParse(kDesignExample)), HasSubstr("\"chunk_tokens\":\"auto\""));
}

TEST(JobSpecTest, JsonIsValidatedLikeYaml) {
  absl::StatusOr<JobSpec> bad_lr = JobSpecFromJson(
      R"({"name":"j","model":"m","data":"d","objective":"sft","seq_len":8,"train":{"lr":-1}})");
  ASSERT_FALSE(bad_lr.ok());
  EXPECT_EQ(bad_lr.status().message(), "job.json: train.lr: must be a positive number (got -1)");

  absl::StatusOr<JobSpec> bad_type = JobSpecFromJson(
      R"({"name":"j","model":"m","data":"d","objective":"sft","seq_len":"eight"})", "row 7");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_EQ(bad_type.status().message(), "row 7: seq_len: must be an integer (got 'eight')");

  absl::StatusOr<JobSpec> unknown = JobSpecFromJson(
      R"({"name":"j","model":"m","data":"d","objective":"sft","seq_len":8,"trian":{}})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown key 'trian' (did you mean"));

  absl::StatusOr<JobSpec> syntax = JobSpecFromJson(R"({"name":)");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(syntax.status().message(), HasSubstr("job.json: invalid JSON"));

  absl::StatusOr<JobSpec> overflow = JobSpecFromJson(R"({"seq_len":1e999})");
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobSpecTest, EnumNames) {
  EXPECT_EQ(ObjectiveName(Objective::kGrpo), "grpo");
  EXPECT_EQ(LrScheduleName(LrSchedule::kCosine), "cosine");
  EXPECT_EQ(PrecisionName(Precision::kBf16), "bf16");
  EXPECT_EQ(GrpoLossName(GrpoLoss::kDrGrpo), "dr_grpo");
  EXPECT_EQ(TruncationName(Truncation::kTruncate), "truncate");
}

class JobSpecFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = MakeTempDir("job-spec-files");
    std::filesystem::create_directories(base_ + "/models/tiny");
    WriteFile(base_ + "/models/tiny/config.json", "{}");
    std::filesystem::create_directories(base_ + "/models/empty");
    WriteFile(base_ + "/data.jsonl", "{\"input_ids\": [1, 2]}\n");
  }

  JobSpec Spec(absl::string_view extra = "") {
    return MustParse(absl::StrCat(
        "name: j\nmodel: models/tiny\ndata: data.jsonl\nobjective: sft\nseq_len: 8\n", extra));
  }

  std::string base_;
};

TEST_F(JobSpecFilesTest, RelativePathsFromBaseDir) {
  EXPECT_TRUE(ValidateJobSpecFiles(Spec(), base_).ok());
  JobSpec absolute = Spec();
  absolute.model = base_ + "/models/tiny";
  absolute.data = base_ + "/data.jsonl";
  EXPECT_TRUE(ValidateJobSpecFiles(absolute, "/nonexistent").ok());
  EXPECT_EQ(ResolveJobPath("/a/b", "c/d"), "/a/b/c/d");
  EXPECT_EQ(ResolveJobPath("/a/b", "/c"), "/c");
  EXPECT_EQ(ResolveJobPath("", "c"), "c");
}

TEST_F(JobSpecFilesTest, NamesTheField) {
  JobSpec s = Spec();
  s.model = "models/missing";
  absl::Status status = ValidateJobSpecFiles(s, base_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model: directory '"));
  EXPECT_THAT(status.message(), HasSubstr("models/missing' does not exist"));

  s.model = "models/empty";
  EXPECT_THAT(ValidateJobSpecFiles(s, base_).message(),
              HasSubstr("model: directory '" + base_ + "/models/empty' has no config.json"));

  s.model = "data.jsonl";
  EXPECT_THAT(ValidateJobSpecFiles(s, base_).message(), HasSubstr("is not a directory"));

  s = Spec();
  s.data = "nope.jsonl";
  EXPECT_THAT(ValidateJobSpecFiles(s, base_).message(),
              HasSubstr("data: file '" + base_ + "/nope.jsonl' does not exist"));
  s.data = "models";
  EXPECT_THAT(ValidateJobSpecFiles(s, base_).message(), HasSubstr("data: '"));
}

TEST_F(JobSpecFilesTest, ReferenceModelOnlyWhenUsed) {
  JobSpec dpo = Spec("dpo: {reference: models/empty}\n");
  EXPECT_TRUE(ValidateJobSpecFiles(dpo, base_).ok());  // an SFT job ignores it
  dpo.objective = Objective::kDpo;
  EXPECT_THAT(
      ValidateJobSpecFiles(dpo, base_).message(),
      HasSubstr("dpo.reference: directory '" + base_ + "/models/empty' has no config.json"));
  dpo.dpo.reference = "models/tiny";
  EXPECT_TRUE(ValidateJobSpecFiles(dpo, base_).ok());

  JobSpec grpo = Spec("grpo: {reference: models/empty}\n");
  grpo.objective = Objective::kGrpo;
  EXPECT_THAT(ValidateJobSpecFiles(grpo, base_).message(), HasSubstr("grpo.reference:"));
  grpo.grpo.beta = 0;  // no KL term, no reference model
  EXPECT_TRUE(ValidateJobSpecFiles(grpo, base_).ok());
}

// ---------------------------------------------------------------------------
// Hostile input: every number bounded, text and nesting capped before parsing.

std::string SpecError(absl::string_view yaml) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  EXPECT_FALSE(spec.ok()) << yaml.substr(0, 200);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  return std::string(spec.status().message());
}

TEST(JobSpecLimits, EveryNumberIsBounded) {
  const std::pair<std::string, std::string> cases[] = {
      {"train: {sequences_per_step: 1152921504606846977}\n",
       "job.yaml: train.sequences_per_step: must be at most 1048576 (got 1152921504606846977)"},
      {"train: {sequences_per_step: 99999999999999999999999}\n",
       "job.yaml: train.sequences_per_step: must be at most 1048576 (got "
       "99999999999999999999999)"},
      {"train: {steps: -99999999999999999999999}\n",
       "job.yaml: train.steps: must be a positive integer (got -99999999999999999999999)"},
      {"train: {micro_batch_sequences: 2000000}\n",
       "job.yaml: train.micro_batch_sequences: must be at most 1048576 (got 2000000)"},
      {"train: {steps: 1000000001}\n",
       "job.yaml: train.steps: must be at most 1000000000 (got 1000000001)"},
      {"train: {epochs: 9223372036854775807}\n",
       "job.yaml: train.epochs: must be at most 1000000000"},
      {"log_every_steps: 1000000001\n", "job.yaml: log_every_steps: must be at most 1000000000"},
      {"streambp: {chunk_tokens: 16777217}\n",
       "job.yaml: streambp.chunk_tokens: must be at most 16777216 (got 16777217)"},
      {"streambp: {logits_chunk_tokens: 99999999999999999999}\n",
       "job.yaml: streambp.logits_chunk_tokens: must be at most 16777216"},
      {"resources: {world_size: 65537}\n",
       "job.yaml: resources.world_size: must be at most 65536 (got 65537)"},
      {"max_restarts: 1001\n", "job.yaml: max_restarts: must be at most 1000 (got 1001)"},
      {"checkpoint: {every_steps: 1000000001}\n",
       "job.yaml: checkpoint.every_steps: must be at most 1000000000"},
      {"checkpoint: {keep_last: 1000000001}\n",
       "job.yaml: checkpoint.keep_last: must be at most 1000000000"},
      {"resources: {memory: 99999999999TiB}\n", "job.yaml: resources.memory: must be a positive"},
      {"priority: 99999999999999999999\n",
       "job.yaml: priority: must be at most 9223372036854775807"},
  };
  for (const auto& [extra, message] : cases) {
    EXPECT_THAT(SpecError(absl::StrCat(kMinimal, extra)), HasSubstr(message)) << extra;
  }
  EXPECT_EQ(SpecError("name: j\nmodel: m\ndata: d\nobjective: sft\nseq_len: 16777217\n"),
            "job.yaml: seq_len: must be at most 16777216 (got 16777217)");
  // The limits themselves are accepted.
  const JobSpec at_limit = MustParse(absl::StrCat(
      "name: j\nmodel: m\ndata: d\nobjective: sft\nseq_len: 16777216\n",
      "streambp: {chunk_tokens: 16777216, logits_chunk_tokens: 16777216}\n"
      "train: {steps: 1000000000, sequences_per_step: 1048576, micro_batch_sequences: 1048576,\n"
      "        epochs: 1000000000, seed: 9223372036854775807}\n"
      "resources: {world_size: 65536}\n"
      "checkpoint: {every_steps: 1000000000, keep_last: 1000000000}\n"
      "log_every_steps: 1000000000\nmax_restarts: 1000\n"));
  EXPECT_EQ(at_limit.train.sequences_per_step, kMaxSpecSequencesPerStep);
  EXPECT_EQ(at_limit.seq_len, kMaxSpecSeqLen);
  EXPECT_EQ(at_limit.train.seed, INT64_MAX);
  EXPECT_EQ(at_limit.resources.world_size, kMaxSpecWorldSize);
  // JSON goes through the same checks.
  JobSpec s = MustParse(kMinimal);
  std::string json = JobSpecToJson(s);
  json = absl::StrReplaceAll(
      json, {{"\"sequences_per_step\":8", "\"sequences_per_step\":" + std::to_string(1LL << 60)}});
  EXPECT_THAT(std::string(JobSpecFromJson(json).status().message()),
              HasSubstr("job.json: train.sequences_per_step: must be at most 1048576"));
}

TEST(JobSpecLimits, DeepNestingIsRefusedBeforeParsing) {
  // Flow collections: counted before yaml-cpp sees the text.
  EXPECT_EQ(SpecError(absl::StrCat(kMinimal, "train: ", std::string(50000, '['))),
            "job.yaml: line 6: YAML nested deeper than 64 levels");
  EXPECT_EQ(SpecError(absl::StrCat(kMinimal, "dpo: {reference: ", std::string(100, '{'),
                                   std::string(100, '}'), "}\n")),
            "job.yaml: line 6: YAML nested deeper than 64 levels");
  // Block nesting: yaml-cpp stops at its own depth limit, an error as well.
  std::string block = "train:\n";
  for (int i = 0; i < 20000; ++i) block += "- ";
  block += "x\n";
  EXPECT_EQ(SpecError(absl::StrCat(kMinimal, block)),
            "job.yaml: line 7: YAML nested deeper than 500 levels");
  std::string indented;
  for (int i = 0; i < 340; ++i) absl::StrAppend(&indented, std::string(i, ' '), "k:\n");
  EXPECT_THAT(SpecError(indented), HasSubstr("job.yaml: unknown key 'k'"));
  // JSON specs are checked the same way.
  absl::StatusOr<JobSpec> json = JobSpecFromJson(
      absl::StrCat("{\"train\": ", std::string(20000, '['), std::string(20000, ']'), "}"));
  EXPECT_EQ(json.status().message(), "job.json: JSON nested deeper than 64 levels (at byte 73)");
}

TEST(JobSpecLimits, StrayCommaIsAnErrorNotAnEndlessParse) {
  // yaml-cpp 0.7's LoadAll never gets past these and allocates until memory
  // runs out.
  EXPECT_EQ(SpecError(","), "job.yaml: line 1, column 1: invalid YAML: unexpected ','");
  EXPECT_EQ(SpecError("# comment\n  , x"),
            "job.yaml: line 2, column 3: invalid YAML: unexpected ','");
  EXPECT_EQ(SpecError("[a], b"), "job.yaml: line 1, column 4: invalid YAML: unexpected ','");
  EXPECT_EQ(SpecError(absl::StrCat(kMinimal, "...\n,\n")),
            "job.yaml: line 7, column 1: invalid YAML: unexpected ','");
  // Real multi-document streams are still counted.
  EXPECT_EQ(SpecError("---\n---\n---\n"),
            "job.yaml: expected one YAML document, found 3 (separated by ---)");
  EXPECT_EQ(SpecError(absl::StrCat(kMinimal, "---\n", kMinimal)),
            "job.yaml: expected one YAML document, found 2 (separated by ---)");
}

TEST(JobSpecLimits, StringsMustBeUtf8) {
  EXPECT_EQ(SpecError("name: j\nmodel: m\ndata: \"d.js\xfe\xffonl\"\nobjective: sft\nseq_len: 8\n"),
            "job.yaml: data: must be valid UTF-8 text (got 'd.js\\xfe\\xffonl')");
  EXPECT_THAT(SpecError(absl::StrCat(kMinimal, "checkpoint: {dir: \"r\xc0\xafn\"}\n")),
              HasSubstr("job.yaml: checkpoint.dir: must be valid UTF-8 text"));
  const JobSpec spec =
      MustParse(absl::StrCat(kMinimal, "checkpoint: {dir: \"runs/\xc3\xa9t\xc3\xa9\"}\n"));
  EXPECT_EQ(spec.checkpoint.dir, "runs/\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(*JobSpecFromJson(JobSpecToJson(spec)), spec);
}

// Paths no system call can take are bad input naming the field (they were a
// storage error, retried, when the run created its directory).
TEST(JobSpecLimits, PathsFitTheFileSystemsLimits) {
  const std::string long_name(256, 'x');
  EXPECT_THAT(SpecError(absl::StrCat(kMinimal, "checkpoint: {dir: runs/", long_name, "}\n")),
              HasSubstr("job.yaml: checkpoint.dir: has a component of 256 bytes ('xxxxxxxxxxxxxxxx"
                        "...'); a file name is at most 255 bytes"));
  EXPECT_THAT(SpecError(absl::StrCat(kMinimal, "resume_from: \"a\\0b\"\n")),
              HasSubstr("job.yaml: resume_from: must not hold a NUL byte"));
  // A raw CR at the end of a plain scalar did not survive JobSpecToYaml (the
  // job-spec fuzzer found it); control bytes are refused, naming the byte.
  EXPECT_THAT(SpecError("name: j\nmodel: m\ndata: {path: d.shard\r\r, packing: true}\n"
                        "objective: sft\nseq_len: 8\n"),
              HasSubstr("job.yaml: data.path: must not hold control characters (byte 0x0d at "
                        "offset 7)"));
  EXPECT_THAT(SpecError(absl::StrCat(kMinimal, "resume_from: \"a\\tb\"\n")),
              HasSubstr("job.yaml: resume_from: must not hold control characters (byte 0x09"));
  std::string deep;
  for (int i = 0; i < 300; ++i) absl::StrAppend(&deep, "abcdefghijklm/");
  EXPECT_THAT(SpecError(absl::StrCat("name: j\nmodel: ", deep, "\ndata: d\nobjective: sft\n",
                                     "seq_len: 8\n")),
              HasSubstr("job.yaml: model: is 4200 bytes long; a path is at most 4095 bytes"));
  EXPECT_EQ(
      MustParse(absl::StrCat(kMinimal, "checkpoint: {dir: runs/", std::string(255, 'x'), "}\n"))
          .checkpoint.dir.size(),
      5u + 255u);
}

TEST(JobSpecLimits, OversizedTextIsRefused) {
  std::string text = kMinimal;
  text.append(static_cast<size_t>(kMaxJobSpecBytes), '#');
  EXPECT_EQ(SpecError(text), absl::StrCat("job.yaml: the job spec has ", text.size(),
                                          " bytes, over the 64 KiB limit"));
  std::string json = JobSpecToJson(MustParse(kMinimal));
  json.insert(1, std::string(static_cast<size_t>(6 * kMaxJobSpecBytes), ' '));
  EXPECT_THAT(std::string(JobSpecFromJson(json).status().message()),
              HasSubstr("job.json: the job spec has"));
  EXPECT_THAT(std::string(JobSpecFromJson(json).status().message()),
              HasSubstr("bytes, over the 384 KiB limit"));
}

TEST(JobSpecLimits, ReadJobSpecFileReadsOnlyRegularFiles) {
  namespace fs = std::filesystem;
  const std::string dir = MakeTempDir("job-spec-file");
  WriteFile(dir + "/job.yaml", kMinimal);
  absl::StatusOr<std::string> text = ReadJobSpecFile(dir + "/job.yaml");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, kMinimal);
  EXPECT_EQ(ReadJobSpecFile(dir + "/missing.yaml").status().code(), absl::StatusCode::kNotFound);

  const std::string fifo = dir + "/fifo.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadJobSpecFile(fifo).status().message(),
            fifo + ": is a FIFO, not a regular file (only regular files are read)");
  fs::create_symlink("/dev/zero", dir + "/zero.yaml");
  EXPECT_THAT(std::string(ReadJobSpecFile(dir + "/zero.yaml").status().message()),
              HasSubstr("is a character device, not a regular file"));
  const std::string sparse = dir + "/sparse.yaml";
  WriteFile(sparse, "x");
  fs::resize_file(sparse, uint64_t{20} << 30);
  EXPECT_EQ(ReadJobSpecFile(sparse).status().message(),
            sparse + ": has 21474836480 bytes, over the 64 KiB limit for a job spec");
}

TEST_F(JobSpecFilesTest, ConfigAndDataMustBeRegularFiles) {
  namespace fs = std::filesystem;
  fs::create_directories(base_ + "/models/fifo");
  ASSERT_EQ(::mkfifo((base_ + "/models/fifo/config.json").c_str(), 0600), 0);
  JobSpec s = Spec();
  s.model = "models/fifo";
  EXPECT_EQ(ValidateJobSpecFiles(s, base_).message(),
            "model: '" + base_ +
                "/models/fifo/config.json' is not a regular file (only regular "
                "files are read)");
  s = Spec();
  fs::create_symlink("/dev/zero", base_ + "/zero.jsonl");
  s.data = "zero.jsonl";
  EXPECT_EQ(ValidateJobSpecFiles(s, base_).message(),
            "data: '" + base_ + "/zero.jsonl' is not a regular file (only regular files are read)");
}

}  // namespace
}  // namespace sbp

namespace sbp {
namespace {

// train.zero_stage: 2 by default and left out of the stored form; 3 round
// trips, and is refused where every worker could not run the same passes.
TEST(JobSpecZeroStage, ParsesChecksAndRoundTrips) {
  const JobSpec two = MustParse(kMinimal);
  EXPECT_EQ(two.train.zero_stage, 2);
  EXPECT_EQ(JobSpecToJson(two).find("zero_stage"), std::string::npos);
  const std::string base = absl::StrCat(kMinimal, "resources: {world_size: 4}\n");
  const JobSpec three =
      MustParse(absl::StrCat(base, "train: {zero_stage: 3, sequences_per_step: 8}\n"));
  EXPECT_EQ(three.train.zero_stage, 3);
  EXPECT_EQ(*JobSpecFromJson(JobSpecToJson(three)), three);
  EXPECT_EQ(*ParseJobSpec(JobSpecToYaml(three), "again.yaml"), three);
  EXPECT_THAT(SpecError(absl::StrCat(base, "train: {zero_stage: 1}\n")),
              HasSubstr("job.yaml: train.zero_stage: must be 2"));
  EXPECT_THAT(SpecError(absl::StrCat(kMinimal, "train: {zero_stage: 3}\n")),
              HasSubstr("train.zero_stage: 3 shards the compute weights over the job's workers"));
  EXPECT_THAT(SpecError(absl::StrCat(base, "train: {zero_stage: 3, sequences_per_step: 6}\n")),
              HasSubstr("train.sequences_per_step: must be a multiple of the 4 data-parallel"));
  EXPECT_THAT(SpecError("name: j\nmodel: m\ndata: d\nobjective: grpo\nseq_len: 8\n"
                        "resources: {world_size: 2}\ntrain: {zero_stage: 3, "
                        "sequences_per_step: 2}\n"),
              HasSubstr("not supported with objective grpo"));
  EXPECT_THAT(SpecError("name: j\nmodel: m\ndata: {path: d, packing: true}\nobjective: sft\n"
                        "seq_len: 8\nresources: {world_size: 2}\ntrain: {zero_stage: 3, "
                        "sequences_per_step: 2}\n"),
              HasSubstr("not supported with data.packing"));
  EXPECT_THAT(SpecError(absl::StrCat(base, "train: {zero_stage: 3, sequences_per_step: 8}\n",
                                     "lora: {r: 4}\n")),
              HasSubstr("not supported with lora"));
}

}  // namespace
}  // namespace sbp
