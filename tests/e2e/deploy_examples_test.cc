// examples/k8s-job.yaml: the job spec in its ConfigMap is one a real
// coordinator accepts, and the Kubernetes Job submits that file with the
// client token the manifests mount.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/match.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

TEST(DeployExamplesTest, KubernetesJobSubmitsAnAcceptedSpec) {
  const std::vector<YAML::Node> docs =
      YAML::LoadAllFromFile(SourceDir() + "/examples/k8s-job.yaml");
  std::string spec, config_map;
  std::vector<std::string> args;
  for (const YAML::Node& doc : docs) {
    const std::string kind = doc["kind"].as<std::string>();
    if (kind == "ConfigMap") {
      config_map = doc["metadata"]["name"].as<std::string>();
      spec = doc["data"]["job.yaml"].as<std::string>();
    } else if (kind == "Job") {
      const YAML::Node pod = doc["spec"]["template"]["spec"];
      args = pod["containers"][0]["args"].as<std::vector<std::string>>();
      EXPECT_EQ(pod["volumes"][0]["configMap"]["name"].as<std::string>(), config_map);
    }
  }
  ASSERT_FALSE(spec.empty()) << "no ConfigMap with job.yaml";
  ASSERT_FALSE(args.empty()) << "no Job";
  EXPECT_NE(std::find(args.begin(), args.end(), "/etc/streambp/job/job.yaml"), args.end());
  EXPECT_NE(std::find(args.begin(), args.end(), "submit"), args.end());

  Cluster c("deploy_examples");
  c.StartCoordinator();
  const CommandResult submit = c.Sbp("submit " + c.WriteSpec("k8s-job", spec) + " -o json");
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const nlohmann::json job = nlohmann::json::parse(submit.out, nullptr, false);
  ASSERT_TRUE(job.is_object()) << submit.out;
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_PENDING");
  // It waits for the GPU workers it asks for.
  EXPECT_TRUE(absl::StrContains(job.value("reason", ""), "cuda")) << job.dump();
}

}  // namespace
}  // namespace sbp::testing
