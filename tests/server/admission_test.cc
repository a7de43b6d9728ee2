// Admission with the memory planner: a job no registered worker can hold is
// refused at submit with RESOURCE_EXHAUSTED and the planner's numbers; a job
// that fits some workers waits for those only, and its pending reason names
// them.
#include "server/admission.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "tests/server/coordinator_fixture.h"
#include "worker/model/model_config.h"
#include "worker/train/job_spec.h"

namespace sbp::server::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kGiB = int64_t{1} << 30;

// A model directory holding only config.json (all the planner reads).
std::string ModelDir(const std::string& name, const std::string& preset) {
  const std::filesystem::path dir = FreshDir("model_" + name);
  std::ofstream(dir / "config.json") << ModelConfigToJson(*PresetConfig(preset));
  return dir.string();
}

std::string PlannedSpec(const std::string& name, const std::string& model, int64_t seq_len,
                        const std::string& resources = "{world_size: 1, device: cpu}") {
  return absl::StrCat("name: ", name, "\nmodel: ", model,
                      "\ndata: d.jsonl\nobjective: sft\nseq_len: ", seq_len,
                      "\nresources: ", resources, "\n");
}

JobSpec MustParse(const std::string& yaml) {
  auto spec = ParseJobSpec(yaml, "spec");
  CHECK_OK(spec.status());
  return *spec;
}

// ---------------------------------------------------------------------------
// Through the gRPC services.

class AdmissionTest : public CoordinatorTest {};

TEST_F(AdmissionTest, ImpossibleJobIsRefusedWithThePlannersNumbers) {
  Start();
  worker_->MustRegister("small", kGiB);
  const std::string model = ModelDir("refused", "bench-qwen3");
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(PlannedSpec("too-big", model, 4096), &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  const std::string message = status.error_message();
  EXPECT_THAT(message, StartsWith("the job fits no registered cpu worker: it needs "));
  EXPECT_THAT(message, HasSubstr("stream mode at seq_len 4096 with chunk_tokens 64 and "
                                 "logits_chunk_tokens 64 peaks at"));
  EXPECT_THAT(message, HasSubstr("weights 641.5 MiB"));
  EXPECT_THAT(message, HasSubstr("optimizer_moments 1.3 GiB"));
  EXPECT_THAT(message, HasSubstr("5% safety margin"));
  EXPECT_THAT(message, HasSubstr("the largest of 1 registered cpu worker has 1.0 GiB"));
  // Nothing was created.
  v1::ListJobsResponse list;
  ASSERT_TRUE(client_->List(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

TEST_F(AdmissionTest, BudgetBelowThePlanIsRefused) {
  Start();
  worker_->MustRegister("big", 16 * kGiB);
  const std::string model = ModelDir("budget", "bench-qwen3");
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(
      PlannedSpec("budget", model, 1024, "{world_size: 1, device: cpu, memory: 1GiB}"), &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), StartsWith("resources.memory: 1.0 GiB is less than the job "
                                                 "needs: "));
  EXPECT_THAT(status.error_message(), HasSubstr("raise resources.memory to at least"));
}

TEST_F(AdmissionTest, PossibleJobWaitsForAndRunsOnAWorkerThatFits) {
  Start();
  const std::string big = worker_->MustRegister("big", 16 * kGiB);
  // An unplanned job (relative path, no work directory) occupies the big worker.
  const std::string first = MustSubmit(Spec("first"));
  v1::Assignment a = worker_->MustGetAssignment(big);
  ASSERT_EQ(a.job_id(), first);
  const std::string small = worker_->MustRegister("small", kGiB);

  const std::string model = ModelDir("fits", "bench-qwen3");
  const std::string yaml = PlannedSpec("planned", model, 1024);
  const AdmissionPlan plan = PlanAdmission(MustParse(yaml), PathPolicy{});
  ASSERT_TRUE(plan.planned) << plan.note;
  EXPECT_GT(plan.required_memory_bytes, 2 * kGiB);  // weights, gradients, AdamW: 2.5 GiB
  EXPECT_LT(plan.required_memory_bytes, 4 * kGiB);

  const std::string id = MustSubmit(yaml);
  v1::Job job = client_->MustGet(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.required_memory_bytes(), plan.required_memory_bytes);
  EXPECT_EQ(job.reason(), absl::StrCat("needs 1 idle cpu worker with >= ",
                                       FormatByteSize(plan.required_memory_bytes),
                                       "; 0 idle (1 busy, 1 too small); fits: ", big));
  // The plan is in the job's events.
  v1::JobEventsResponse events;
  ASSERT_TRUE(client_->Events(id, &events).ok());
  bool noted = false;
  for (const v1::JobEvent& e : events.events()) {
    noted = noted || e.message().rfind(absl::StrCat("memory plan from ", model,
                                                    "/config.json: "
                                                    "needs "),
                                       0) == 0;
  }
  EXPECT_TRUE(noted);
  // The small idle worker gets nothing; the big one gets the job once free.
  v1::GetAssignmentResponse none;
  ASSERT_TRUE(worker_->GetAssignment(small, 0, &none).ok());
  EXPECT_FALSE(none.has_assignment());
  ASSERT_TRUE(worker_->Finish(big, a, v1::OUTCOME_SUCCEEDED).ok());
  v1::Assignment next = worker_->MustGetAssignment(big);
  EXPECT_EQ(next.job_id(), id);
  ASSERT_TRUE(worker_->GetAssignment(small, 0, &none).ok());
  EXPECT_FALSE(none.has_assignment());
}

TEST_F(AdmissionTest, UnreadableModelIsAdmittedAndSaysSo) {
  Start();
  worker_->MustRegister("tiny", kGiB);
  const std::string id = MustSubmit(PlannedSpec("unknown", "/nonexistent/model", 1 << 20));
  v1::JobEventsResponse events;
  ASSERT_TRUE(client_->Events(id, &events).ok());
  ASSERT_GE(events.events_size(), 2);
  EXPECT_THAT(events.events(1).message(),
              StartsWith("memory not planned: /nonexistent/model/config.json: cannot open"));
  EXPECT_THAT(events.events(1).message(),
              HasSubstr("admitted without a planned memory requirement"));
}

TEST_F(AdmissionTest, RelativeModelPathsResolveUnderTheWorkDirectory) {
  CoordinatorOptions options;
  const std::filesystem::path work = FreshDir("work_dir");
  std::filesystem::create_directories(work / "models" / "b");
  std::ofstream(work / "models" / "b" / "config.json")
      << ModelConfigToJson(*PresetConfig("bench-qwen3"));
  options.work_dir = work.string();
  Start(options);
  worker_->MustRegister("small", kGiB);
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(PlannedSpec("rel", "models/b", 4096), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
}

TEST_F(AdmissionTest, SequenceParallelismThatSplitsNoHeadsIsRefusedAtSubmit) {
  Start();
  worker_->MustRegister("big", 64 * kGiB);
  const std::string model = ModelDir("sp_heads", "bench-qwen3");  // 8 query, 4 KV heads
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(
      PlannedSpec("sp3", model, 4096, "{world_size: 3, sequence_parallel: 3, device: cpu}"),
      &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(),
              StartsWith("resources.sequence_parallel: 3 ranks cannot share the model's "
                         "attention heads"));
  EXPECT_THAT(status.error_message(), HasSubstr("its 8 query heads"));
  EXPECT_THAT(status.error_message(), HasSubstr("its 4 KV heads"));
  // P above the KV heads replicates them: admitted.
  std::string id = MustSubmit(
      PlannedSpec("sp8", model, 4096, "{world_size: 8, sequence_parallel: 8, device: cpu}"));
  EXPECT_FALSE(id.empty());
}

// ---------------------------------------------------------------------------
// The admission functions.

// A job of N workers in groups of P that share each sequence needs, of each
// worker, one rank's plan with P and N: 1/P of the tokens, ZeRO-2 over all N.
TEST(Admission, SequenceParallelJobIsPlannedPerRank) {
  const std::string resources = "{world_size: 4, sequence_parallel: 4, device: cpu}";
  const JobSpec split = MustParse(PlannedSpec("sp", "bench-qwen3", 65536, resources));
  const AdmissionPlan plan = PlanAdmission(split, PathPolicy{});
  ASSERT_TRUE(plan.planned) << plan.note;
  EXPECT_EQ(plan.request.world_size, 4);
  EXPECT_EQ(plan.request.sequence_parallel, 4);
  EXPECT_EQ(plan.minimum.local_tokens, 16384);
  EXPECT_GT(plan.minimum.Term("sequence_parallel_kv"), 0);
  EXPECT_EQ(plan.minimum.peak_bytes, PlanMinimum(plan.request)->peak_bytes);
  EXPECT_THAT(plan.note, HasSubstr("each sequence split over 4 ranks (sequence parallelism: "
                                   "16384 tokens per rank)"));
  // The same job without sequence parallelism needs more of every worker.
  const JobSpec whole =
      MustParse(PlannedSpec("dp", "bench-qwen3", 65536, "{world_size: 4, device: cpu}"));
  const AdmissionPlan whole_plan = PlanAdmission(whole, PathPolicy{});
  ASSERT_TRUE(whole_plan.planned) << whole_plan.note;
  EXPECT_LT(plan.required_memory_bytes, whole_plan.required_memory_bytes);
  const int64_t between = (plan.required_memory_bytes + whole_plan.required_memory_bytes) / 2;
  const std::vector<WorkerCapacity> workers = {{"w", DeviceKind::kCpu, between}};
  EXPECT_TRUE(CheckAdmission(split, plan, workers).ok());
  const absl::Status refused = CheckAdmission(whole, whole_plan, workers);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;

  // Too large for the workers: more workers are suggested in whole groups.
  const JobSpec big = MustParse(PlannedSpec("spbig", "bench-qwen3", 4096,
                                            "{world_size: 2, sequence_parallel: 2, device: cpu}"));
  const AdmissionPlan big_plan = PlanAdmission(big, PathPolicy{});
  ASSERT_TRUE(big_plan.planned) << big_plan.note;
  const absl::Status more = CheckAdmission(big, big_plan, {{"w", DeviceKind::kCpu, 3 * kGiB / 2}});
  ASSERT_EQ(more.code(), absl::StatusCode::kResourceExhausted);
  const std::string message(more.message());
  const std::string marker = "more workers: resources.world_size: ";
  const size_t at = message.find(marker);
  ASSERT_NE(at, std::string::npos) << message;
  const int64_t suggested = std::stoll(message.substr(at + marker.size()));
  EXPECT_GT(suggested, 2) << message;
  EXPECT_EQ(suggested % 2, 0) << message;
}

TEST(Admission, PresetNamesArePlannedAndRelativePathsNeedAWorkDirectory) {
  const JobSpec preset = MustParse(PlannedSpec("p", "qwen3-8b", 4096));
  AdmissionPlan plan = PlanAdmission(preset, PathPolicy{});
  EXPECT_TRUE(plan.planned);
  EXPECT_THAT(plan.note, StartsWith("memory plan from preset qwen3-8b: needs "));

  const JobSpec relative = MustParse(PlannedSpec("r", "models/x", 4096));
  plan = PlanAdmission(relative, PathPolicy{});
  EXPECT_FALSE(plan.planned);
  EXPECT_THAT(plan.note, HasSubstr("'models/x' is relative and the coordinator has no --work-dir"));
  EXPECT_EQ(plan.required_memory_bytes, 0);

  const std::filesystem::path dir = FreshDir("broken_model");
  std::ofstream(dir / "config.json") << "{\"hidden_size\": 0";
  plan = PlanAdmission(MustParse(PlannedSpec("b", dir.string(), 4096)), PathPolicy{});
  EXPECT_FALSE(plan.planned);
  EXPECT_THAT(plan.note, HasSubstr("malformed JSON"));
}

TEST(Admission, CudaJobTooLongForAnyGpuGetsAShorterSequenceSuggestion) {
  const JobSpec spec = MustParse(
      "name: long\nmodel: qwen3-8b\ndata: d.jsonl\nobjective: sft\nseq_len: 200000\n"
      "train: {precision: bf16}\nresources: {world_size: 1, device: cuda}\n");
  const AdmissionPlan plan = PlanAdmission(spec, PathPolicy{});
  ASSERT_TRUE(plan.planned) << plan.note;
  EXPECT_EQ(plan.request.precision, DType::kBF16);
  EXPECT_EQ(plan.safety_margin, 0.10);
  // Only CPU workers: it waits for a GPU.
  EXPECT_TRUE(CheckAdmission(spec, plan, {{"c", DeviceKind::kCpu, 512 * kGiB}}).ok());
  const absl::Status status = CheckAdmission(
      spec, plan, {{"a", DeviceKind::kCuda, 80 * kGiB}, {"b", DeviceKind::kCuda, 40 * kGiB}});
  ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  const std::string message(status.message());
  EXPECT_THAT(message, HasSubstr("the largest of 2 registered cuda workers has 80.0 GiB"));
  EXPECT_THAT(message, HasSubstr("10% safety margin"));
  EXPECT_THAT(message, HasSubstr("layer_inputs"));
  // AdamW state alone (16 bytes per parameter) exceeds one GPU: shard it.
  EXPECT_THAT(message, HasSubstr("more workers and a shorter sequence: resources.world_size: 4 "
                                 "with seq_len at most "));
  // A large enough worker admits it.
  EXPECT_TRUE(CheckAdmission(spec, plan, {{"a", DeviceKind::kCuda, 4096 * kGiB}}).ok());
}

TEST(Admission, BaselineModesAreToldAboutStreamBpAndMoreWorkers) {
  const JobSpec spec = MustParse(
      "name: ckpt\nmodel: bench-qwen3\ndata: d.jsonl\nobjective: sft\nseq_len: 16384\n"
      "streambp: {mode: checkpoint}\nresources: {world_size: 1, device: cpu}\n");
  const AdmissionPlan plan = PlanAdmission(spec, PathPolicy{});
  ASSERT_TRUE(plan.planned) << plan.note;
  const absl::Status status = CheckAdmission(spec, plan, {{"w", DeviceKind::kCpu, 8 * kGiB}});
  ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  const std::string message(status.message());
  EXPECT_THAT(message, HasSubstr("checkpoint mode at seq_len 16384 peaks at"));
  EXPECT_THAT(message, HasSubstr("logits_gradient"));
  EXPECT_THAT(message, HasSubstr("To fit a 8.0 GiB worker: streambp.mode: stream"));
  EXPECT_THAT(message, HasSubstr("a shorter seq_len: at most "));
}

TEST(Admission, ChunksTooLargeForTheWorkerGetSmallerOnes) {
  const JobSpec spec = MustParse(
      "name: chunky\nmodel: bench-qwen3\ndata: d.jsonl\nobjective: dpo\nseq_len: 16384\n"
      "streambp: {mode: stream, chunk_tokens: 16384, logits_chunk_tokens: 16384}\n"
      "resources: {world_size: 1, device: cpu}\n");
  const AdmissionPlan plan = PlanAdmission(spec, PathPolicy{});
  ASSERT_TRUE(plan.planned) << plan.note;
  EXPECT_GT(plan.minimum.Term("reference_weights"), 0);
  EXPECT_GT(plan.minimum.Term("objective_scratch"), 0);
  const absl::Status status = CheckAdmission(spec, plan, {{"w", DeviceKind::kCpu, 8 * kGiB}});
  ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("smaller chunks: streambp.chunk_tokens: "));
}

// The search for suggestions runs under the job manager's lock, so its work
// per submit is bounded: 16M-token jobs of every preset model, in a baseline
// mode and in stream mode, against workers from tiny to huge (the longer a
// sequence fits, the longer the seq_len searches) are decided quickly.
TEST(Admission, PlannerWorkPerSubmitIsBounded) {
  absl::Duration slowest;
  for (const std::string& model : PresetNames()) {
    for (const char* mode : {"full", "stream"}) {
      for (int64_t memory : {int64_t{64} << 20, 4 * kGiB, 256 * kGiB}) {
        const JobSpec spec = MustParse(
            absl::StrCat("name: hopeless\nmodel: ", model, "\ndata: d.jsonl\nobjective: dpo\n",
                         "seq_len: 16000000\nstreambp: {mode: ", mode,
                         "}\nresources: {world_size: 1, device: cpu}\n"));
        const AdmissionPlan plan = PlanAdmission(spec, PathPolicy{});
        ASSERT_TRUE(plan.planned) << plan.note;
        const absl::Time start = absl::Now();
        const absl::Status status = CheckAdmission(spec, plan, {{"w", DeviceKind::kCpu, memory}});
        const absl::Duration took = absl::Now() - start;
        slowest = std::max(slowest, took);
        EXPECT_TRUE(status.ok() || status.code() == absl::StatusCode::kResourceExhausted) << status;
        EXPECT_LT(took, absl::Milliseconds(600))
            << model << " " << mode << " " << memory << ": " << status.message();
      }
    }
  }
  std::printf("{\"slowest_check_admission_seconds\": %.3f}\n", absl::ToDoubleSeconds(slowest));
}

}  // namespace
}  // namespace sbp::server::testing
