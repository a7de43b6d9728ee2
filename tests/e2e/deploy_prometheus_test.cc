// deploy/prometheus.yml against a real Prometheus (Debian's, when installed):
// promtool accepts the file, and Prometheus running its scrape configs
// reports the coordinator's and the workers' targets up, keeps its own `job`
// (the scrape job) and `instance` while the series carry the training job's
// id as `job_id`, and names each target's `instance` after the pod, or after
// the worker (<pod>-gpu<i>) in a whole-node pod. Only service discovery
// changes: each DNS SRV name becomes a static loopback target carrying the
// SRV record's target and the name looked up, as DNS discovery would label
// it inside the cluster; relabeling and paths are the file's own. The live
// /metrics of the coordinator and a worker running a job also pass
// `promtool check metrics`, and no series of theirs uses a label Prometheus
// reserves (job, instance, __*) or would rename (exported_*).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

struct Target {
  int port;
  std::string srv_target;  // what Kubernetes DNS publishes for the pod
};

// The file with its DNS SRV discovery replaced by static targets: each SRV
// name of `targets` (the rest have no process here and are dropped), with a
// 1 s scrape interval; "" when a job of `jobs` is missing, discovers
// differently or names none of `targets`.
std::string Localize(const std::string& path, const std::set<std::string>& jobs,
                     const std::map<std::string, Target>& targets) {
  YAML::Node config = YAML::LoadFile(path);
  config["global"]["scrape_interval"] = "1s";
  std::set<std::string> replaced;
  for (YAML::Node job : config["scrape_configs"]) {
    const std::string name = job["job_name"].as<std::string>();
    if (!jobs.count(name) || !job["dns_sd_configs"]) return "";
    for (const YAML::Node& sd : job["dns_sd_configs"]) {
      for (const YAML::Node& srv : sd["names"]) {
        auto it = targets.find(srv.as<std::string>());
        if (it == targets.end()) continue;
        YAML::Node group;
        group["targets"].push_back(absl::StrCat("127.0.0.1:", it->second.port));
        group["labels"]["__meta_dns_srv_record_target"] = it->second.srv_target;
        group["labels"]["__meta_dns_name"] = it->first;
        job["static_configs"].push_back(group);
        replaced.insert(name);
      }
    }
    job.remove("dns_sd_configs");
  }
  if (replaced != jobs) return "";
  YAML::Emitter out;
  out << config;
  return out.c_str();
}

// The body of an HTTP response.
std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

// Label names of the exposition text's samples that Prometheus reserves or
// renames: job and instance (it sets them itself), __* (internal) and
// exported_* (what it renames a clash to).
std::set<std::string> ReservedLabels(const std::string& text) {
  std::set<std::string> found;
  static const std::regex kLabel(R"(([a-zA-Z_][a-zA-Z0-9_]*)=")");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t open = line.find('{'), close = line.rfind('}');
    if (open == absl::string_view::npos || close == absl::string_view::npos) continue;
    const std::string labels(line.substr(open + 1, close - open - 1));
    for (std::sregex_iterator it(labels.begin(), labels.end(), kLabel), end; it != end; ++it) {
      const std::string name = (*it)[1].str();
      if (name == "job" || name == "instance" || absl::StartsWith(name, "__") ||
          absl::StartsWith(name, "exported_")) {
        found.insert(name);
      }
    }
  }
  return found;
}

TEST(DeployPrometheusTest, ScrapesCoordinatorAndWorkerWithTheDeployConfig) {
  const std::string prometheus = "/usr/bin/prometheus", promtool = "/usr/bin/promtool";
  if (!std::filesystem::exists(prometheus)) GTEST_SKIP() << "no " << prometheus;
  const std::string path = SourceDir() + "/deploy/prometheus.yml";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  Cluster c("deploy_prometheus");
  const CommandResult check = RunCommand(promtool + " check config " + path, c.dir());
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;

  // A whole-node pod's first two workers (the other GPUs' records have no process here).
  const int coordinator_metrics = FreePort(), web = FreePort();
  const int worker_metrics[2] = {FreePort(), FreePort()};
  const std::string pod = "streambp-worker-0.streambp-worker.streambp.svc.cluster.local.";
  const std::string config = Localize(
      path, {"streambp-coordinator", "streambp-workers"},
      {{"_metrics._tcp.streambp-coordinator.streambp.svc.cluster.local",
        {coordinator_metrics, "streambp-coordinator.streambp.svc.cluster.local."}},
       {"_metrics-gpu0._tcp.streambp-worker.streambp.svc.cluster.local", {worker_metrics[0], pod}},
       {"_metrics-gpu1._tcp.streambp-worker.streambp.svc.cluster.local",
        {worker_metrics[1], pod}}});
  ASSERT_FALSE(config.empty())
      << path
      << ": expected the jobs streambp-coordinator and streambp-workers, each with "
         "dns_sd_configs, the workers' naming the whole-node pods' ports metrics-gpu0 and "
         "metrics-gpu1";
  WriteFile(c.dir() / "prometheus.yml", config);
  c.StartCoordinator(3, {"--metrics-listen", absl::StrCat("127.0.0.1:", coordinator_metrics)});
  for (int i = 0; i < 2; ++i) {
    c.StartWorker(absl::StrCat("streambp-worker-0-gpu", i),
                  {absl::StrCat("--metrics-listen=127.0.0.1:", worker_metrics[i])});
  }
  Process server({prometheus, "--config.file=prometheus.yml", "--storage.tsdb.path=tsdb",
                  absl::StrCat("--web.listen-address=127.0.0.1:", web), "--log.level=warn"},
                 c.dir(), c.dir() / "prometheus.log");
  const std::string id = c.Submit(c.WriteSpec("scraped", c.Spec("scraped", 100000, 8, 0)));
  ASSERT_FALSE(id.empty());

  // Every target up, by pool: the coordinator and both workers.
  auto targets_up = [&] {
    const nlohmann::json j =
        nlohmann::json::parse(Body(HttpGet(web, "/api/v1/targets?state=active")), nullptr, false);
    if (!j.is_object() || !j.contains("data")) return false;
    std::multiset<std::string> up;
    for (const auto& t : j["data"]["activeTargets"]) {
      if (t.value("health", "") == "up") up.insert(t.value("scrapePool", ""));
    }
    return up == std::multiset<std::string>{"streambp-coordinator", "streambp-workers",
                                            "streambp-workers"};
  };
  EXPECT_TRUE(WaitFor(targets_up, seconds(40)))
      << HttpGet(web, "/api/v1/targets") << ReadAll((c.dir() / "prometheus.log").string());

  // Series keep Prometheus' job and an instance per worker, and the job id as job_id.
  auto has_series = [&](const std::string& query, const std::vector<std::string>& texts) {
    const std::string body = HttpGet(web, "/api/v1/query?query=" + query);
    if (body.find("\"status\":\"success\"") == std::string::npos) return false;
    for (const std::string& text : texts) {
      if (body.find(text) == std::string::npos) return false;
    }
    return true;
  };
  EXPECT_TRUE(WaitFor(
      [&] {
        return has_series("up", {"\"instance\":\"streambp-worker-0-gpu0\"",
                                 "\"instance\":\"streambp-worker-0-gpu1\"",
                                 "\"instance\":\"streambp-coordinator\""});
      },
      seconds(20)))
      << HttpGet(web, "/api/v1/query?query=up");
  const std::string job_id = "\"job_id\":\"" + id + "\"";
  EXPECT_TRUE(WaitFor(
      [&] {
        return has_series("sbp_train_step", {job_id, "\"job\":\"streambp-workers\"",
                                             "\"instance\":\"streambp-worker-0-gpu"});
      },
      seconds(40)))
      << HttpGet(web, "/api/v1/query?query=sbp_train_step") << c.Logs();
  EXPECT_TRUE(WaitFor(
      [&] {
        return has_series("sbp_job_progress_step", {job_id, "\"job\":\"streambp-coordinator\"",
                                                    "\"instance\":\"streambp-coordinator\""});
      },
      seconds(20)))
      << HttpGet(web, "/api/v1/query?query=sbp_job_progress_step");
  for (const char* query : {"sbp_train_step", "sbp_job_progress_step", "sbp_jobs"}) {
    EXPECT_EQ(HttpGet(web, absl::StrCat("/api/v1/query?query=", query)).find("exported_"),
              std::string::npos)
        << query;
  }

  // The live exposition mid-run: promtool's lint, and no reserved label.
  std::string worker_text;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int port : worker_metrics) {
          worker_text = Body(HttpGet(port, "/metrics"));
          if (absl::StrContains(worker_text, "sbp_train_step{job_id=")) return true;
        }
        return false;
      },
      seconds(20)));
  const std::string coordinator_text = Body(HttpGet(coordinator_metrics, "/metrics"));
  ASSERT_TRUE(absl::StrContains(coordinator_text, "sbp_job_progress_step{job_id="))
      << coordinator_text;
  for (const auto& [who, text] :
       {std::pair<std::string, std::string>{"coordinator", coordinator_text},
        {"worker", worker_text}}) {
    WriteFile(c.dir() / (who + ".prom"), text);
    const CommandResult lint = RunCommand(promtool + " check metrics < " + who + ".prom", c.dir());
    EXPECT_EQ(lint.exit_code, 0) << who << ": " << lint.out << lint.err;
    EXPECT_EQ(lint.out + lint.err, "") << who << ": promtool check metrics";
    EXPECT_EQ(ReservedLabels(text), std::set<std::string>{}) << who << ":\n" << text;
  }
  c.Sbp("cancel " + id);
  server.Kill(SIGTERM);
}

}  // namespace
}  // namespace sbp::testing
