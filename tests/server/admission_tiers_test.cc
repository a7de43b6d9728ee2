// Admission and scheduling with the memory tiers: workers register the host
// memory and offload disk they offer; a job whose layer checkpoints or
// optimizer state live off the device needs host memory (and `checkpoints:
// auto`'s disk tier offload disk) beside device memory. A job no registered
// worker can hold is refused at submit naming the short resource; a pending
// job's reason names what it needs; `checkpoints: auto` fits a worker in any
// tier. Sizes come from the planner (bench-qwen3 at 64K tokens: about 2.5 GiB
// of model state, 384 MiB of layer inputs off the device).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "server/admission.h"
#include "server/worker_need.h"
#include "tests/server/coordinator_fixture.h"
#include "worker/train/job_spec.h"

namespace sbp::server::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int64_t kGiB = int64_t{1} << 30;

// bench-qwen3 (a preset name: the coordinator has no work directory) at 64K
// tokens with `offload` as streambp.offload and `train` as train.
std::string TierSpec(const std::string& name, const std::string& offload,
                     const std::string& train = "{steps: 2}") {
  return absl::StrCat("name: ", name,
                      "\nmodel: bench-qwen3\ndata: d.jsonl\nobjective: sft\nseq_len: 65536\n",
                      offload.empty() ? "" : absl::StrCat("streambp: {offload: ", offload, "}\n"),
                      "train: ", train, "\nresources: {world_size: 1, device: cpu}\n");
}

AdmissionPlan MustPlan(const std::string& yaml) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "spec");
  CHECK_OK(spec.status());
  AdmissionPlan plan = PlanAdmission(*spec, PathPolicy{});
  CHECK(plan.planned) << plan.note;
  return plan;
}

class AdmissionTiersTest : public CoordinatorTest {};

TEST_F(AdmissionTiersTest, WorkersRegisterWhatTheyOfferTheTiers) {
  Start();
  const std::string w = worker_->MustRegisterTiers("tiers", 8 * kGiB, 64 * kGiB, 200 * kGiB);
  worker_->MustRegister("plain", 8 * kGiB);
  v1::ListWorkersResponse list;
  ASSERT_TRUE(client_->ListWorkers(&list).ok());
  ASSERT_EQ(list.workers_size(), 2);
  for (const v1::Worker& worker : list.workers()) {
    const bool tiers = worker.id() == w;
    EXPECT_EQ(worker.host_memory_bytes(), tiers ? 64 * kGiB : 0) << worker.name();
    EXPECT_EQ(worker.offload_disk_bytes(), tiers ? 200 * kGiB : 0) << worker.name();
  }
  // Negative figures are refused, naming the field.
  v1::RegisterWorkerResponse response;
  grpc::Status status = worker_->Register("bad", 8 * kGiB, &response, "", -1, 0);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), StartsWith("host_memory_bytes: "));
  status = worker_->Register("bad", 8 * kGiB, &response, "", 0, -5);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), StartsWith("offload_disk_bytes: "));

  // A coordinator restarted on the same database still knows them.
  Start();
  ASSERT_TRUE(client_->ListWorkers(&list).ok());
  bool found = false;
  for (const v1::Worker& worker : list.workers()) {
    if (worker.id() != w) continue;
    found = true;
    EXPECT_EQ(worker.host_memory_bytes(), 64 * kGiB);
    EXPECT_EQ(worker.offload_disk_bytes(), 200 * kGiB);
  }
  EXPECT_TRUE(found);
}

TEST_F(AdmissionTiersTest, HostTierJobNeedsAWorkerWithTheHostMemory) {
  Start();
  const std::string yaml = TierSpec("host-tier", "{checkpoints: host}");
  const AdmissionPlan plan = MustPlan(yaml);
  ASSERT_EQ(plan.tiers.size(), 1u);
  const WorkerNeed need = plan.tiers[0].need;
  ASSERT_GT(need.host_memory_bytes, 256 << 20);  // 3 layer inputs of [65536, 512] f32
  EXPECT_EQ(need.offload_disk_bytes, 0);
  EXPECT_EQ(plan.required_host_memory_bytes, need.host_memory_bytes);

  // Plenty of device memory, too little host memory, and none at all.
  worker_->MustRegisterTiers("short", 4 * need.memory_bytes, need.host_memory_bytes / 2);
  worker_->MustRegister("none", 4 * need.memory_bytes);
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(yaml, &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  const std::string message = status.error_message();
  EXPECT_THAT(message, StartsWith("the job fits no registered cpu worker: with its layer "
                                  "checkpoints in host memory (streambp.offload.checkpoints: "
                                  "host) it needs "));
  EXPECT_THAT(message, HasSubstr(absl::StrCat(FormatByteSize(need.host_memory_bytes), " (",
                                              need.host_memory_bytes, " bytes) of host memory")));
  EXPECT_THAT(message, HasSubstr("host_layer_inputs"));
  EXPECT_THAT(message,
              HasSubstr(absl::StrCat("host memory is short: the most any of the 2 registered cpu "
                                     "workers with enough device memory offers is ",
                                     FormatByteSize(need.host_memory_bytes / 2))));
  v1::ListJobsResponse list;
  ASSERT_TRUE(client_->List(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);

  // A worker with enough host memory admits it, and gets it.
  const std::string roomy =
      worker_->MustRegisterTiers("roomy", need.memory_bytes, need.host_memory_bytes);
  const std::string id = MustSubmit(yaml);
  const v1::Job job = client_->MustGet(id);
  EXPECT_EQ(job.required_memory_bytes(), need.memory_bytes);
  EXPECT_EQ(job.required_host_memory_bytes(), need.host_memory_bytes);
  EXPECT_EQ(job.required_offload_disk_bytes(), 0);
  EXPECT_EQ(worker_->MustGetAssignment(roomy).job_id(), id);
}

TEST_F(AdmissionTiersTest, NoWorkerOfferingHostMemoryIsNamedAsSuch) {
  Start();
  const std::string yaml =
      TierSpec("offload", "{checkpoints: device}", "{steps: 2, optimizer_offload: true}");
  const AdmissionPlan plan = MustPlan(yaml);
  const WorkerNeed need = plan.tiers[0].need;
  ASSERT_GT(need.host_memory_bytes, 0);  // gradients, masters and moments on the host
  worker_->MustRegister("plain", 4 * need.memory_bytes);
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(yaml, &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("layer checkpoints on the device and optimizer state in host memory"));
  EXPECT_THAT(status.error_message(),
              HasSubstr("host memory is short: none of the 1 registered cpu worker with enough "
                        "device memory offers host memory (sbp-worker --host-memory)"));
  EXPECT_THAT(status.error_message(), HasSubstr("host_optimizer_moments"));
}

TEST_F(AdmissionTiersTest, PendingReasonNamesTheHostMemory) {
  Start();
  const std::string yaml = TierSpec("waits", "{checkpoints: host}");
  const WorkerNeed need = MustPlan(yaml).tiers[0].need;
  const std::string big =
      worker_->MustRegisterTiers("big", 2 * need.memory_bytes, 2 * need.host_memory_bytes);
  // An unplanned job (relative model path, no work directory) occupies it.
  const std::string first = MustSubmit(Spec("first"));
  const v1::Assignment a = worker_->MustGetAssignment(big);
  ASSERT_EQ(a.job_id(), first);
  const std::string small =
      worker_->MustRegisterTiers("small", 2 * need.memory_bytes, need.host_memory_bytes / 4);

  const std::string id = MustSubmit(yaml);
  v1::Job job = client_->MustGet(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.reason(),
            absl::StrCat("needs 1 idle cpu worker with >= ", FormatByteSize(need.memory_bytes),
                         " and >= ", FormatByteSize(need.host_memory_bytes),
                         " host memory; 0 idle (1 busy, 1 too small); fits: ", big));
  v1::GetAssignmentResponse none;
  ASSERT_TRUE(worker_->GetAssignment(small, 0, &none).ok());
  EXPECT_FALSE(none.has_assignment());
  ASSERT_TRUE(worker_->Finish(big, a, v1::OUTCOME_SUCCEEDED).ok());
  EXPECT_EQ(worker_->MustGetAssignment(big).job_id(), id);
}

TEST_F(AdmissionTiersTest, AutoRunsInTheHostTierWhereTheDeviceIsTooSmall) {
  Start();
  const std::string yaml = TierSpec("auto", "");  // checkpoints: auto, the default
  const AdmissionPlan plan = MustPlan(yaml);
  ASSERT_EQ(plan.tiers.size(), 3u);
  const WorkerNeed device = plan.tiers[0].need, host = plan.tiers[1].need,
                   disk = plan.tiers[2].need;
  EXPECT_EQ(device.host_memory_bytes, 0);
  EXPECT_LT(host.memory_bytes, device.memory_bytes);
  EXPECT_GT(host.host_memory_bytes, 0);
  EXPECT_GT(disk.offload_disk_bytes, 0);
  EXPECT_THAT(plan.note, HasSubstr("checkpoints: auto takes the fastest tier the worker fits"));
  ASSERT_EQ(plan.needs.size(), 3u);

  // Device memory for the host tier only, and too little host memory: refused,
  // the device tier's numbers first, then the host tier's short host memory.
  worker_->MustRegisterTiers("mid", host.memory_bytes, host.host_memory_bytes / 2);
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(yaml, &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  const std::string message = status.error_message();
  EXPECT_THAT(message, StartsWith("the job fits no registered cpu worker: it needs "));
  EXPECT_THAT(message, HasSubstr(". Nor in another memory tier: with its layer checkpoints in "
                                 "host memory (streambp.offload.checkpoints: host) it needs "));
  EXPECT_THAT(message, HasSubstr("host memory is short"));
  // The disk tier is not offered by any worker.
  EXPECT_THAT(message, HasSubstr("offload disk is short: none of the 1 cpu worker with enough "
                                 "device and host memory offers offload disk"));

  // The same device memory with enough host memory admits it: the job needs
  // the device tier's memory, or the host tier's with host memory.
  const std::string fits =
      worker_->MustRegisterTiers("fits", host.memory_bytes, host.host_memory_bytes);
  const std::string id = MustSubmit(yaml);
  const v1::Job job = client_->MustGet(id);
  EXPECT_EQ(job.required_memory_bytes(), device.memory_bytes);
  EXPECT_EQ(job.required_host_memory_bytes(), 0);
  EXPECT_EQ(worker_->MustGetAssignment(fits).job_id(), id);
}

TEST_F(AdmissionTiersTest, AutoTakesTheDiskTierOnlyWhereAWorkerOffersDisk) {
  Start();
  const std::string yaml = TierSpec("auto-disk", "");
  const AdmissionPlan plan = MustPlan(yaml);
  const WorkerNeed disk = plan.tiers[2].need;
  ASSERT_GT(disk.offload_disk_bytes, 0);
  // No host memory to speak of, and an offload disk that is too small, then one that fits.
  worker_->MustRegisterTiers("small-disk", disk.memory_bytes, 1 << 20, disk.offload_disk_bytes / 2);
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(yaml, &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("layer checkpoints on local disk (streambp.offload.checkpoints: disk)"));
  EXPECT_THAT(status.error_message(), HasSubstr("offload disk is short: the most any of the 1 cpu "
                                                "worker with enough device and host memory "
                                                "offers is "));
  const std::string roomy =
      worker_->MustRegisterTiers("disk", disk.memory_bytes, 1 << 20, disk.offload_disk_bytes);
  const std::string id = MustSubmit(yaml);
  EXPECT_EQ(worker_->MustGetAssignment(roomy).job_id(), id);
}

TEST_F(AdmissionTiersTest, ExplicitDiskTierNeedsNoOffloadDiskFigure) {
  Start();
  const std::string yaml = TierSpec("disk", "{checkpoints: disk}");
  const AdmissionPlan plan = MustPlan(yaml);
  ASSERT_EQ(plan.tiers.size(), 1u);
  const WorkerNeed need = plan.tiers[0].need;
  EXPECT_EQ(need.offload_disk_bytes, 0);  // bounded by the worker's disk itself
  EXPECT_GT(plan.tiers[0].minimum.disk_bytes, 256 << 20);
  const std::string w = worker_->MustRegisterTiers("plain-disk", need.memory_bytes, 8 * kGiB);
  const std::string id = MustSubmit(yaml);
  const v1::Job job = client_->MustGet(id);
  EXPECT_EQ(job.required_offload_disk_bytes(), 0);
  EXPECT_EQ(worker_->MustGetAssignment(w).job_id(), id);
}

TEST_F(AdmissionTiersTest, AutoJobWaitingForABusyHostWorkerNamesTheHostTier) {
  Start();
  const std::string yaml = TierSpec("auto-wait", "");
  const AdmissionPlan plan = MustPlan(yaml);
  const WorkerNeed host = plan.tiers[1].need;
  // The only worker fits the job in the host tier only, and is busy.
  const std::string w =
      worker_->MustRegisterTiers("mid", host.memory_bytes, host.host_memory_bytes);
  const std::string first = MustSubmit(Spec("first"));
  ASSERT_EQ(worker_->MustGetAssignment(w).job_id(), first);
  const std::string id = MustSubmit(yaml);
  EXPECT_EQ(client_->MustGet(id).reason(),
            absl::StrCat("needs 1 idle cpu worker with >= ", FormatByteSize(host.memory_bytes),
                         " and >= ", FormatByteSize(host.host_memory_bytes),
                         " host memory; 0 idle (1 busy, 0 too small)"));
  // Its needs survive a restart of the coordinator.
  Start();
  EXPECT_THAT(client_->MustGet(id).reason(), HasSubstr(" host memory; "));
}

// ---------------------------------------------------------------------------
// The needs themselves.

TEST(WorkerNeedTest, MeetsTextAndDominance) {
  const WorkerNeed device{8 * kGiB, 0, 0}, host{2 * kGiB, 64 * kGiB, 0},
      disk{2 * kGiB, 0, 100 * kGiB};
  EXPECT_TRUE(Meets({8 * kGiB, 0, 0}, device));
  EXPECT_FALSE(Meets({4 * kGiB, 0, 0}, device));
  EXPECT_FALSE(Meets({4 * kGiB, 0, 0}, host));  // no host memory offered
  EXPECT_TRUE(Meets({4 * kGiB, 64 * kGiB, 0}, host));
  EXPECT_FALSE(Meets({4 * kGiB, 64 * kGiB, 0}, disk));
  EXPECT_TRUE(MeetsAny({4 * kGiB, 0, 100 * kGiB}, {device, host, disk}));
  EXPECT_EQ(NeedText(device), ">= 8.0 GiB");
  EXPECT_EQ(NeedText(host), ">= 2.0 GiB and >= 64.0 GiB host memory");
  EXPECT_EQ(NeedText({2 * kGiB, kGiB, 100 * kGiB}),
            ">= 2.0 GiB, >= 1.0 GiB host memory and >= 100.0 GiB offload disk");
  EXPECT_EQ(NeedsClause({device, host}),
            " with >= 8.0 GiB or >= 2.0 GiB and >= 64.0 GiB host memory");
  EXPECT_EQ(NeedsClause({{}}), "");
  // A need asking for at least as much of everything as an earlier one goes.
  EXPECT_EQ(WithoutDominated({host, {4 * kGiB, 64 * kGiB, 0}, device}),
            (std::vector<WorkerNeed>{host, device}));
  EXPECT_EQ(NeedsFromJson(NeedsToJson({host, disk})), (std::vector<WorkerNeed>{host, disk}));
  EXPECT_TRUE(NeedsFromJson("[[1, 2]]").empty());
  EXPECT_TRUE(NeedsFromJson("garbage").empty());
}

}  // namespace
}  // namespace sbp::server::testing
