// The memory tiers through the control plane, with real processes: workers
// register the host memory and offload disk they offer (`sbp workers` shows
// them); admission refuses a job whose host memory no worker offers, naming
// it; jobs whose layer checkpoints live in host memory or on disk run, `sbp
// get` shows where, and the worker's /metrics (scraped by a real Prometheus
// where one is installed) has the tier's memory. The tiny model at 16 tokens:
// its one offloaded layer input is 4 KiB.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

constexpr int64_t kGiB = int64_t{1} << 30;

// The cluster's spec with streambp.offload.checkpoints = `tier`.
std::string TierSpec(const Cluster& c, const std::string& name, const std::string& tier,
                     int steps) {
  std::string spec = c.Spec(name, steps, 2, steps);
  const std::string chunks = "logits_chunk_tokens: 4}";
  spec.replace(spec.find(chunks), chunks.size(),
               absl::StrCat("logits_chunk_tokens: 4, offload: {checkpoints: ", tier, "}}"));
  return spec;
}

// The value of the sample `series` (name and labels exactly) in the
// exposition `text`; -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// Waits for `id` to end; its final state.
std::string WaitForEnd(const Cluster& c, const std::string& id) {
  std::string state;
  WaitFor(
      [&] {
        state = c.State(id);
        return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED";
      },
      seconds(90));
  return state;
}

TEST(MemoryTiersTest, WorkersRegisterWhatTheyOfferAndSbpWorkersShowsIt) {
  Cluster c("tiers_workers");
  c.StartCoordinator();
  c.StartWorker("offers", {"--host-memory", "3GiB", "--offload-disk", "5GiB"});
  c.StartWorker("default");
  nlohmann::json workers;
  ASSERT_TRUE(WaitFor(
      [&] {
        workers = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
        return workers.is_object() && workers.contains("workers") && workers["workers"].size() == 2;
      },
      seconds(20)))
      << c.Logs();
  for (const nlohmann::json& w : workers["workers"]) {
    if (w.value("name", "") == "offers") {
      EXPECT_EQ(Cluster::Int(w["host_memory_bytes"]), 3 * kGiB) << w;
      EXPECT_EQ(Cluster::Int(w["offload_disk_bytes"]), 5 * kGiB) << w;
    } else {
      // The machine's (or container's) memory, and no offload disk.
      EXPECT_GT(Cluster::Int(w["host_memory_bytes"]), 0) << w;
      EXPECT_EQ(Cluster::Int(w["offload_disk_bytes"]), 0) << w;
    }
  }
  const CommandResult table = c.Sbp("workers");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("HOST MEMORY"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("OFFLOAD DISK"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("3.0 GiB"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("5.0 GiB"), std::string::npos) << table.out;

  // Bad figures are refused at the command line.
  const CommandResult bad = RunCommand(
      BinaryDir() + "/bin/sbp-worker --host-memory 0 --coordinator 127.0.0.1:1", c.dir());
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--host-memory"), std::string::npos) << bad.err;
}

TEST(MemoryTiersTest, AdmissionRefusesAHostTierJobNoWorkersHostMemoryHolds) {
  Cluster c("tiers_admission");
  // A work directory: the coordinator reads the model's config.json and plans.
  c.StartCoordinator(3, {"--work-dir", c.dir().string()});
  c.StartWorker("small-host", {"--host-memory", "1KiB"});
  ASSERT_TRUE(WaitFor([&] { return c.Sbp("workers").out.find("small-host") != std::string::npos; },
                      seconds(20)))
      << c.Logs();
  const CommandResult r = c.Sbp("submit " + c.WriteSpec("host", TierSpec(c, "host", "host", 2)));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("host memory is short"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("host_layer_inputs"), std::string::npos) << r.err;
  // The device tier needs no host memory: the same worker takes it.
  const std::string id = c.Submit(c.WriteSpec("device", TierSpec(c, "device", "device", 1)));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitForEnd(c, id), "SUCCEEDED") << c.Logs();
}

// A job of `tier` runs to success; `sbp get` and the worker's /metrics show
// the tier's memory. Returns the job as `sbp get -o json` shows it.
nlohmann::json RunTierJob(Cluster& c, const std::string& tier) {
  const std::string id = c.Submit(c.WriteSpec(tier, TierSpec(c, tier, tier, 3)));
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(WaitForEnd(c, id), "SUCCEEDED") << c.Logs();
  const nlohmann::json job = c.GetJob(id);
  EXPECT_TRUE(job.is_object());
  const CommandResult text = c.Sbp("get " + id);
  EXPECT_NE(text.out.find("memory tier:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(tier), std::string::npos) << text.out;
  return job;
}

class MemoryTiersRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<Cluster>("tiers_run");
    metrics_port_ = FreePort();
    cluster_->StartCoordinator(3, {"--work-dir", cluster_->dir().string()});
    cluster_->StartWorker("w0", {absl::StrCat("--metrics-listen=127.0.0.1:", metrics_port_)});
  }
  std::unique_ptr<Cluster> cluster_;
  int metrics_port_ = 0;
};

TEST_F(MemoryTiersRunTest, HostTierJobRunsAndShowsItsHostMemory) {
  Cluster& c = *cluster_;
  // A real Prometheus scrapes the worker while the job runs, where installed.
  const std::string prometheus = "/usr/bin/prometheus";
  const bool scraped = std::filesystem::exists(prometheus);
  const int web = FreePort();
  std::unique_ptr<Process> server;
  if (scraped) {
    WriteFile(c.dir() / "prometheus.yml",
              absl::StrCat("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                           "  - job_name: sbp\n    static_configs:\n"
                           "      - targets: ['127.0.0.1:",
                           metrics_port_, "']\n"));
    server = std::make_unique<Process>(
        std::vector<std::string>{
            prometheus, "--config.file=prometheus.yml", "--storage.tsdb.path=tsdb",
            absl::StrCat("--web.listen-address=127.0.0.1:", web), "--log.level=warn"},
        c.dir(), c.dir() / "prometheus.log");
  }
  const nlohmann::json job = RunTierJob(c, "host");
  const nlohmann::json& p = job["progress"];
  EXPECT_EQ(p.value("checkpoint_tier", ""), "host") << job;
  EXPECT_FALSE(p.value("optimizer_offload", true)) << job;
  EXPECT_GT(Cluster::Int(p["host_tier_peak_bytes"]), 0) << job;
  EXPECT_GT(Cluster::Int(p["host_tier_bytes"]), 0) << job;
  EXPECT_EQ(Cluster::Int(p["disk_tier_bytes"]), 0) << job;

  const std::string text = HttpGet(metrics_port_, "/metrics");
  EXPECT_GT(Sample(text, "sbp_worker_memory_peak_bytes{tier=\"host\"}"), 0) << text;
  EXPECT_GT(Sample(text, "sbp_worker_memory_peak_bytes{tier=\"device\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "sbp_worker_memory_peak_bytes{tier=\"disk\"}"), 0) << text;
  EXPECT_GT(Sample(text, "sbp_offload_copy_bytes_total"), 0) << text;
  EXPECT_GE(Sample(text, "sbp_offload_wait_seconds_total"), 0) << text;

  if (scraped) {
    // Prometheus has the host tier's peak, above zero.
    const std::string query =
        "/api/v1/query?query=sbp_worker_memory_peak_bytes%7Btier%3D%22host%22%7D%3E0";
    std::string body;
    EXPECT_TRUE(WaitFor(
        [&] {
          body = HttpGet(web, query);
          return body.find("\"status\":\"success\"") != std::string::npos &&
                 body.find("\"tier\":\"host\"") != std::string::npos;
        },
        seconds(30)))
        << body << ReadAll((c.dir() / "prometheus.log").string());
    server->Kill(SIGTERM);
  }
}

TEST_F(MemoryTiersRunTest, DiskTierJobRunsWithoutAnOffloadDiskFigure) {
  Cluster& c = *cluster_;
  // The worker offers no offload disk (the default): `checkpoints: disk` runs anyway.
  const nlohmann::json job = RunTierJob(c, "disk");
  const nlohmann::json& p = job["progress"];
  EXPECT_EQ(p.value("checkpoint_tier", ""), "disk") << job;
  EXPECT_GT(Cluster::Int(p["disk_tier_bytes"]), 0) << job;
  EXPECT_EQ(Cluster::Int(job["required_offload_disk_bytes"]), 0) << job;
  const std::string text = HttpGet(metrics_port_, "/metrics");
  EXPECT_GT(Sample(text, "sbp_worker_memory_peak_bytes{tier=\"disk\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "sbp_worker_memory_current_bytes{tier=\"disk\"}"), 0) << text;
}

TEST(MemoryTiersRunCommandTest, SbpRunOffersItsWorkersHostMemory) {
  Cluster c("tiers_sbp_run");
  c.WriteSpec("host", TierSpec(c, "host", "host", 2));
  const std::string run = std::string("OMP_NUM_THREADS=1 ") + SbpBinary() + " run host.yaml";
  // Too little host memory for the job: the embedded coordinator refuses it.
  CommandResult r = RunCommand(run + " --host-memory 1KiB", c.dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("host memory is short"), std::string::npos) << r.err;
  // By default each local worker offers its share of the machine's memory.
  r = RunCommand(run, c.dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("SUCCEEDED"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sbp::testing
