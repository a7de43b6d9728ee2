// The coordinator's /metrics: scraped over plain HTTP for the DESIGN §4
// names, and, when /usr/bin/prometheus exists, by a real Prometheus whose
// query API must return the series.
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/match.h"
#include "tests/server/coordinator_fixture.h"
#include "tests/server/process_util.h"

namespace sbp::server::testing {
namespace {

class MetricsTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.metrics_listen = "127.0.0.1:0";
    options.client_token = "client-secret";
    options.worker_token = "worker-secret";
    Start(options);
    ASSERT_FALSE(coordinator_->metrics_address().empty());
  }

  std::string Scrape() {
    std::optional<std::string> body = HttpGet(coordinator_->metrics_address(), "/metrics");
    EXPECT_TRUE(body.has_value());
    return body.value_or("");
  }
};

TEST_F(MetricsTest, ExposesTheDesignNames) {
  // One job runs to success, one fails and is retried, one is running now.
  const std::string w = worker_->MustRegister("host");
  const std::string done = MustSubmit(Spec("done"));
  v1::Assignment a = worker_->MustGetAssignment(w);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(w, a, 2, &r).ok());
  ASSERT_TRUE(worker_->Finish(w, a, v1::OUTCOME_SUCCEEDED).ok());
  const std::string flaky = MustSubmit(Spec("flaky"));
  v1::Assignment b = worker_->MustGetAssignment(w);
  ASSERT_TRUE(worker_->Finish(w, b, v1::OUTCOME_FAILED, v1::FAILURE_CLASS_INTERNAL).ok());
  v1::Assignment c = worker_->MustGetAssignment(w);
  ASSERT_TRUE(worker_->Report(w, c, 7, &r).ok());
  Client stranger(coordinator_->address(), "nope");
  v1::Job ignored;
  EXPECT_FALSE(stranger.Get(done, &ignored).ok());

  std::string text;
  ASSERT_TRUE(WaitFor([&] {
    text = Scrape();
    return absl::StrContains(text,
                             absl::StrCat("sbp_worker_heartbeat_age_seconds{worker=\"", w, "\"}"));
  }));
  const std::vector<std::string> wanted = {
      std::string("# TYPE sbp_jobs gauge"),
      std::string("sbp_jobs{state=\"succeeded\"} 1"),
      std::string("sbp_jobs{state=\"running\"} 1"),
      std::string("sbp_jobs{state=\"pending\"} 0"),
      std::string("# TYPE sbp_job_queue_wait_seconds histogram"),
      std::string("sbp_job_queue_wait_seconds_count 2"),
      std::string("sbp_job_queue_wait_seconds_bucket{le=\"+Inf\"} 2"),
      std::string("# TYPE sbp_workers gauge"),
      std::string("sbp_workers{state=\"busy\"} 1"),
      std::string("sbp_workers{state=\"idle\"} 0"),
      std::string("sbp_workers{state=\"lost\"} 0"),
      std::string("# TYPE sbp_job_restarts_total counter"),
      std::string("sbp_job_restarts_total 1"),
      std::string("# TYPE sbp_grpc_requests_total counter"),
      "sbp_grpc_requests_total{code=\"OK\",method=\"streambp.v1.JobService/Submit\"} 2",
      "sbp_grpc_requests_total{code=\"UNAUTHENTICATED\",method=\"streambp.v1.JobService/"
      "Get\"} 1",
      absl::StrCat("sbp_job_progress_step{job_id=\"", flaky, "\"} 7"),
      absl::StrCat("sbp_job_tokens_per_second{job_id=\"", flaky, "\"} 1000"),
      absl::StrCat("sbp_job_peak_bytes{job_id=\"", flaky, "\"} 1048576"),
  };
  for (const std::string& want : wanted) {
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
  }
  // Per-job series exist only while the job is not finished.
  EXPECT_FALSE(absl::StrContains(text, absl::StrCat("job_id=\"", done, "\""))) << text;
  ASSERT_TRUE(worker_->Finish(w, c, v1::OUTCOME_SUCCEEDED).ok());
  text = Scrape();
  EXPECT_FALSE(absl::StrContains(text, "sbp_job_progress_step{")) << text;
  EXPECT_TRUE(absl::StrContains(text, "sbp_jobs{state=\"succeeded\"} 2")) << text;
}

// A real Prometheus scrapes the coordinator; its HTTP API returns sbp_jobs.
TEST_F(MetricsTest, RealPrometheusScrapes) {
  const std::string prometheus = "/usr/bin/prometheus";
  if (!std::filesystem::exists(prometheus)) GTEST_SKIP() << "no " << prometheus;
  const std::string dir = absl::StrCat(dir_, "/prometheus");
  std::filesystem::create_directories(dir);
  const std::string config = absl::StrCat(dir, "/prometheus.yml");
  const std::string log = absl::StrCat(dir, "/prometheus.log");
  std::ofstream(config)
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
      << "  - job_name: sbp-coordinator\n    static_configs:\n      - targets: ['"
      << coordinator_->metrics_address() << "']\n";
  const std::string web = absl::StrCat("127.0.0.1:", FreePort());
  ChildProcess server({prometheus, absl::StrCat("--config.file=", config),
                       absl::StrCat("--storage.tsdb.path=", dir, "/data"),
                       absl::StrCat("--web.listen-address=", web), "--log.level=warn"},
                      log);
  MustSubmit(Spec("scraped"));
  std::string body;
  const bool found = WaitFor(
      [&] {
        body = HttpGet(web, "/api/v1/query?query=sbp_jobs").value_or("");
        return absl::StrContains(body, "\"status\":\"success\"") &&
               absl::StrContains(body, "\"__name__\":\"sbp_jobs\"") &&
               absl::StrContains(body, "\"state\":\"pending\"");
      },
      absl::Seconds(15));
  EXPECT_TRUE(found) << body << "\n" << ReadText(log);
  if (found) {
    const std::string workers =
        HttpGet(web, "/api/v1/query?query=sbp_grpc_requests_total").value_or("");
    EXPECT_TRUE(absl::StrContains(workers, "streambp.v1.JobService/Submit")) << workers;
  }
  server.Signal(SIGTERM);
  if (!server.Wait(absl::Seconds(5))) server.Signal(SIGKILL);
}

}  // namespace
}  // namespace sbp::server::testing
