// deploy/prometheus.yml against a real Prometheus (Debian's, when installed):
// promtool accepts the file, and Prometheus running its scrape configs
// reports the coordinator's and the worker's targets up, keeps the training
// job's id as `job` (honor_labels) and names each target's `instance` after
// the pod. Only service discovery changes: each job's DNS SRV lookup becomes
// a static loopback target carrying the SRV record's target name, as DNS
// discovery would label it inside the cluster; relabeling, paths and
// honor_labels are the file's own.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

struct Target {
  int port;
  std::string srv_target;  // what Kubernetes DNS publishes for the pod
};

// The file with its DNS SRV discovery replaced by `targets` (by job name) and
// a 1 s scrape interval; "" when a job is missing or discovers differently.
std::string Localize(const std::string& path, const std::map<std::string, Target>& targets) {
  YAML::Node config = YAML::LoadFile(path);
  config["global"]["scrape_interval"] = "1s";
  size_t replaced = 0;
  for (YAML::Node job : config["scrape_configs"]) {
    auto it = targets.find(job["job_name"].as<std::string>());
    if (it == targets.end() || !job["dns_sd_configs"]) return "";
    job.remove("dns_sd_configs");
    YAML::Node group;
    group["targets"].push_back(absl::StrCat("127.0.0.1:", it->second.port));
    group["labels"]["__meta_dns_srv_record_target"] = it->second.srv_target;
    job["static_configs"].push_back(group);
    ++replaced;
  }
  if (replaced != targets.size()) return "";
  YAML::Emitter out;
  out << config;
  return out.c_str();
}

TEST(DeployPrometheusTest, ScrapesCoordinatorAndWorkerWithTheDeployConfig) {
  const std::string prometheus = "/usr/bin/prometheus", promtool = "/usr/bin/promtool";
  if (!std::filesystem::exists(prometheus)) GTEST_SKIP() << "no " << prometheus;
  const std::string path = SourceDir() + "/deploy/prometheus.yml";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  Cluster c("deploy_prometheus");
  const CommandResult check = RunCommand(promtool + " check config " + path, c.dir());
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;

  const int coordinator_metrics = FreePort(), worker_metrics = FreePort(), web = FreePort();
  const std::string config = Localize(
      path, {{"streambp-coordinator",
              {coordinator_metrics, "streambp-coordinator.streambp.svc.cluster.local."}},
             {"streambp-workers",
              {worker_metrics, "streambp-worker-0.streambp-worker.streambp.svc.cluster.local."}}});
  ASSERT_FALSE(config.empty()) << path
                               << ": expected the jobs streambp-coordinator and streambp-workers, "
                                  "each with dns_sd_configs";
  WriteFile(c.dir() / "prometheus.yml", config);
  c.StartCoordinator(3, {"--metrics-listen", absl::StrCat("127.0.0.1:", coordinator_metrics)});
  c.StartWorker("w0", {absl::StrCat("--metrics-listen=127.0.0.1:", worker_metrics)});
  Process server({prometheus, "--config.file=prometheus.yml", "--storage.tsdb.path=tsdb",
                  absl::StrCat("--web.listen-address=127.0.0.1:", web), "--log.level=warn"},
                 c.dir(), c.dir() / "prometheus.log");
  const std::string id = c.Submit(c.WriteSpec("scraped", c.Spec("scraped", 100000, 8, 0)));
  ASSERT_FALSE(id.empty());

  // Both targets up, by pool.
  auto targets_up = [&] {
    const std::string response = HttpGet(web, "/api/v1/targets?state=active");
    const size_t body = response.find("\r\n\r\n");
    if (body == std::string::npos) return false;
    const nlohmann::json j = nlohmann::json::parse(response.substr(body + 4), nullptr, false);
    if (!j.is_object() || !j.contains("data")) return false;
    std::set<std::string> up;
    for (const auto& t : j["data"]["activeTargets"]) {
      if (t.value("health", "") == "up") up.insert(t.value("scrapePool", ""));
    }
    return up == std::set<std::string>{"streambp-coordinator", "streambp-workers"};
  };
  EXPECT_TRUE(WaitFor(targets_up, seconds(40)))
      << HttpGet(web, "/api/v1/targets") << ReadAll((c.dir() / "prometheus.log").string());

  // Series keep the job id as `job` and are named after the pod.
  auto has_series = [&](const std::string& query, const std::vector<std::string>& texts) {
    const std::string body = HttpGet(web, "/api/v1/query?query=" + query);
    if (body.find("\"status\":\"success\"") == std::string::npos) return false;
    for (const std::string& text : texts) {
      if (body.find(text) == std::string::npos) return false;
    }
    return true;
  };
  const std::string job = "\"job\":\"" + id + "\"";
  EXPECT_TRUE(WaitFor(
      [&] {
        return has_series("sbp_train_step", {job, "\"instance\":\"streambp-worker-0\""});
      },
      seconds(40)))
      << HttpGet(web, "/api/v1/query?query=sbp_train_step") << c.Logs();
  EXPECT_TRUE(WaitFor(
      [&] {
        return has_series("sbp_job_progress_step", {job, "\"instance\":\"streambp-coordinator\""});
      },
      seconds(20)))
      << HttpGet(web, "/api/v1/query?query=sbp_job_progress_step");
  EXPECT_EQ(HttpGet(web, "/api/v1/query?query=sbp_train_step").find("exported_job"),
            std::string::npos);
  c.Sbp("cancel " + id);
  server.Kill(SIGTERM);
}

}  // namespace
}  // namespace sbp::testing
