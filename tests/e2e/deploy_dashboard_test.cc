// The Grafana dashboard (deploy/grafana/streambp.json) queries only metrics
// that a live coordinator and worker export: every sbp_* name in its queries
// must be a series in their /metrics while a job runs (histogram queries name
// the _bucket/_sum/_count series of a histogram), and it shows each figure the
// operators' page promises.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

// Every sbp_* name in the dashboard's queries (targets' expr, variables' query).
void CollectNames(const nlohmann::json& j, std::set<std::string>* names) {
  static const std::regex kName("sbp_[a-zA-Z0-9_:]*");
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if (value.is_string() && (key == "expr" || key == "query" || key == "definition")) {
        const std::string text = value.get<std::string>();
        for (std::sregex_iterator it(text.begin(), text.end(), kName), end; it != end; ++it) {
          names->insert(it->str());
        }
      } else {
        CollectNames(value, names);
      }
    }
  } else if (j.is_array()) {
    for (const auto& item : j) CollectNames(item, names);
  }
}

// The exposition text's series names, and each family's TYPE.
struct Scrape {
  std::set<std::string> series;
  std::map<std::string, std::string> types;
};

void Parse(const std::string& text, Scrape* scrape) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() == 2) scrape->types[parts[0]] = parts[1];
    } else if (absl::StartsWith(line, "sbp_")) {
      scrape->series.insert(std::string(line.substr(0, line.find_first_of("{ "))));
    }
  }
}

// "name_bucket" -> "name" for a histogram's series; "" otherwise.
std::string HistogramBase(const std::string& name, const Scrape& scrape) {
  for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
    absl::string_view base = name;
    if (absl::ConsumeSuffix(&base, suffix)) {
      auto it = scrape.types.find(std::string(base));
      if (it != scrape.types.end() && it->second == "histogram") return std::string(base);
    }
  }
  return "";
}

TEST(DeployDashboardTest, QueriesOnlyExportedMetrics) {
  const std::string path = SourceDir() + "/deploy/grafana/streambp.json";
  const nlohmann::json dashboard = nlohmann::json::parse(ReadAll(path), nullptr, false);
  ASSERT_TRUE(dashboard.is_object()) << path << " does not parse";
  std::set<std::string> queried;
  CollectNames(dashboard, &queried);
  for (const char* name :
       {"sbp_jobs", "sbp_job_queue_wait_seconds_bucket", "sbp_workers",
        "sbp_train_tokens_per_second", "sbp_train_mfu_ratio", "sbp_train_step_seconds_bucket",
        "sbp_train_loss", "sbp_worker_memory_peak_bytes", "sbp_worker_memory_capacity_bytes",
        "sbp_job_restarts_total", "sbp_worker_heartbeat_age_seconds"}) {
    EXPECT_TRUE(queried.count(name)) << "the dashboard does not show " << name;
  }

  Cluster c("dashboard");
  const int coordinator_metrics = FreePort(), worker_metrics = FreePort();
  c.StartCoordinator(3, {"--metrics-listen", absl::StrCat("127.0.0.1:", coordinator_metrics)});
  c.StartWorker("w0", {absl::StrCat("--metrics-listen=127.0.0.1:", worker_metrics)});
  // Long enough to be scraped mid-run: per-job series exist only then.
  const std::string id = c.Submit(c.WriteSpec("shown", c.Spec("shown", 100000, 8, 0)));
  ASSERT_FALSE(id.empty());
  const std::string job_label = absl::StrCat("job_id=\"", id, "\"");
  std::string coordinator_text, worker_text;
  EXPECT_TRUE(WaitFor(
      [&] {
        coordinator_text = HttpGet(coordinator_metrics, "/metrics");
        worker_text = HttpGet(worker_metrics, "/metrics");
        return absl::StrContains(worker_text, "sbp_train_step{" + job_label) &&
               absl::StrContains(coordinator_text, "sbp_job_progress_step{" + job_label) &&
               absl::StrContains(coordinator_text, "sbp_worker_heartbeat_age_seconds{");
      },
      seconds(60)))
      << coordinator_text << worker_text << c.Logs();
  c.Sbp("cancel " + id);

  Scrape scrape;
  Parse(coordinator_text, &scrape);
  Parse(worker_text, &scrape);
  // Online GRPO's series exist only for jobs that sample online (this job is
  // SFT); WorkerMetricsTest.RolloutSeriesOnlyForJobsThatSampleOnline
  // (tests/worker/agent/worker_agent_test.cc) checks their names and types.
  static const std::set<std::string> kOnlineGrpoOnly = {"sbp_rollout_reward_mean",
                                                        "sbp_rollout_reward_std",
                                                        "sbp_rollout_completion_length_mean",
                                                        "sbp_rollout_completion_length_max",
                                                        "sbp_rollout_truncated_ratio",
                                                        "sbp_rollout_tokens_per_second",
                                                        "sbp_rollout_seconds_total",
                                                        "sbp_train_compute_seconds_total"};
  for (const std::string& name : queried) {
    if (kOnlineGrpoOnly.count(name)) {
      EXPECT_EQ(worker_text.find(name), std::string::npos) << name << " for an SFT job";
      continue;
    }
    EXPECT_TRUE(scrape.series.count(name))
        << path << " queries " << name << ", which neither the coordinator nor the worker exports";
    EXPECT_TRUE(scrape.types.count(name) || !HistogramBase(name, scrape).empty())
        << name << " is neither a metric family nor a histogram's _bucket/_sum/_count series";
  }
}

}  // namespace
}  // namespace sbp::testing
