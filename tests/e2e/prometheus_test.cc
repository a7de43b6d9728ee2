// A real Prometheus (when /usr/bin/prometheus exists) scrapes a real
// coordinator and a real worker while a job runs; its HTTP API returns the
// coordinator's and the worker's series (DESIGN.md §4 names). Our series name
// the training job `job_id`, so a plain scrape config (no honor_labels) keeps
// both it and Prometheus' own `job`, the scrape job.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

TEST(PrometheusTest, ScrapesCoordinatorAndWorker) {
  const std::string prometheus = "/usr/bin/prometheus";
  if (!std::filesystem::exists(prometheus)) GTEST_SKIP() << "no " << prometheus;
  Cluster c("prometheus");
  const int coordinator_metrics = FreePort(), worker_metrics = FreePort(), web = FreePort();
  c.StartCoordinator(3, {"--metrics-listen", absl::StrCat("127.0.0.1:", coordinator_metrics)});
  c.StartWorker("w0", {absl::StrCat("--metrics-listen=127.0.0.1:", worker_metrics)});
  WriteFile(c.dir() / "prometheus.yml",
            absl::StrCat("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                         "  - job_name: sbp\n    static_configs:\n      - "
                         "targets: ['127.0.0.1:",
                         coordinator_metrics, "', '127.0.0.1:", worker_metrics, "']\n"));
  Process server({prometheus, "--config.file=prometheus.yml", "--storage.tsdb.path=tsdb",
                  absl::StrCat("--web.listen-address=127.0.0.1:", web), "--log.level=warn"},
                 c.dir(), c.dir() / "prometheus.log");

  // A job long enough to be seen running by a 1 s scrape, with a validation
  // loss after every step.
  const std::string id = c.Submit(c.WriteSpec(
      "scraped",
      c.Spec("scraped", 60, 64, 0, "eval: {data: data.jsonl, every_steps: 1, max_examples: 4}\n")));
  ASSERT_FALSE(id.empty());
  auto has_series = [&](const std::string& query, const std::string& text) {
    const std::string body = HttpGet(web, "/api/v1/query?query=" + query);
    return body.find("\"status\":\"success\"") != std::string::npos &&
           body.find(text) != std::string::npos;
  };
  EXPECT_TRUE(WaitFor([&] { return has_series("sbp_train_step", "\"job_id\":\"" + id + "\""); },
                      seconds(40)))
      << HttpGet(web, "/api/v1/query?query=sbp_train_step") << c.Logs()
      << ReadAll((c.dir() / "prometheus.log").string());
  // `job` stays the scrape job's name, and nothing was renamed exported_*.
  const std::string step = HttpGet(web, "/api/v1/query?query=sbp_train_step");
  EXPECT_NE(step.find("\"job\":\"sbp\""), std::string::npos) << step;
  EXPECT_EQ(step.find("exported_"), std::string::npos) << step;
  for (const char* name : {"sbp_worker_memory_peak_bytes", "sbp_worker_memory_capacity_bytes",
                           "sbp_train_tokens_total", "sbp_train_step_seconds_bucket",
                           "sbp_train_loss", "sbp_eval_loss", "sbp_jobs", "sbp_workers"}) {
    EXPECT_TRUE(WaitFor([&] { return has_series(name, absl::StrCat("\"__name__\":\"", name)); },
                        seconds(10)))
        << name << ": " << HttpGet(web, absl::StrCat("/api/v1/query?query=", name));
  }
  // The same validation loss reaches the coordinator and `sbp get`.
  EXPECT_NE(c.Sbp("get " + id).out.find("eval loss:"), std::string::npos) << c.Sbp("get " + id).out;
  c.Sbp("cancel " + id);  // if it is still running
  server.Kill(SIGTERM);
}

}  // namespace
}  // namespace sbp::testing
