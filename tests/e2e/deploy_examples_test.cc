// The deployment examples against the real binaries:
// - examples/k8s-job.yaml: the job spec in its ConfigMap is one a real
//   coordinator accepts, also run as the Helm chart configures it (its users
//   file, work and shared directories, the admin's token) with the model and
//   data where the example's comments copy them; and the Kubernetes Job
//   submits that file with the client token the manifests mount.
// - The chart's worker command lines (tests/deploy/check renders them too):
//   worker.memory given as Kubernetes quantities reaches sbp-worker as sizes
//   its parser reads in the sense Kubernetes means them; values-cpu.yaml's
//   worker runs and registers as rendered; a whole-node pod's launcher starts
//   one real sbp-worker per GPU, each under its own name, and stops them all
//   on SIGTERM.
// The chart tests render with the helm of `scripts/bootstrap --deploy-tools`
// (.venv-deploy/) and skip without it.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/byte_size.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

std::string Helm() { return SourceDir() + "/.venv-deploy/bin/helm"; }

// `helm template streambp helm/streambp --namespace streambp ARGS`, parsed;
// fails the test (and returns nothing) when helm refuses.
std::vector<YAML::Node> Render(const std::filesystem::path& dir, const std::string& args) {
  const CommandResult r =
      RunCommand(Helm() + " template streambp '" + SourceDir() +
                     "/helm/streambp' --kube-version 1.31 --namespace streambp " + args,
                 dir);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  if (r.exit_code != 0) return {};
  return YAML::LoadAll(r.out);
}

YAML::Node Find(const std::vector<YAML::Node>& docs, const std::string& kind,
                const std::string& name) {
  for (const YAML::Node& doc : docs) {
    if (doc && doc["kind"].as<std::string>() == kind &&
        doc["metadata"]["name"].as<std::string>() == name) {
      return doc;
    }
  }
  ADD_FAILURE() << "no " << kind << " " << name << " in the render";
  return YAML::Node();
}

std::string SecretValue(const std::vector<YAML::Node>& docs, const std::string& name,
                        const std::string& key) {
  const YAML::Node secret = Find(docs, "Secret", name);
  std::string value;
  if (secret && secret["data"][key]) {
    absl::Base64Unescape(secret["data"][key].as<std::string>(), &value);
  }
  return value;
}

// The first container of a workload's pod.
YAML::Node Container(const std::vector<YAML::Node>& docs, const std::string& name) {
  const YAML::Node workload = Find(docs, "StatefulSet", name);
  return workload ? workload["spec"]["template"]["spec"]["containers"][0] : YAML::Node();
}

std::vector<std::string> Args(const YAML::Node& container) {
  return container && container["args"] ? container["args"].as<std::vector<std::string>>()
                                        : std::vector<std::string>();
}

// --flag=VALUE's value in `args` ("" when absent).
std::string Flag(const std::vector<std::string>& args, const std::string& flag) {
  for (const std::string& a : args) {
    if (absl::StartsWith(a, flag + "=")) return a.substr(flag.size() + 1);
  }
  return "";
}

// The paths of a pod ("/shared/...", the mounted Secrets' files) moved into
// the test's directory, and the coordinator or a port of this machine in
// place of the cluster's addresses.
std::string Localize(const std::string& arg, const std::filesystem::path& dir,
                     const std::map<std::string, std::string>& more = {}) {
  std::string out = arg;
  for (const auto& [from, to] : more) {
    if (absl::StartsWith(out, from)) out = to;
  }
  return absl::StrReplaceAll(out, {{"=/shared", "=" + (dir / "shared").string()}});
}

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
  EXPECT_EQ(job.value("state", ""), "PENDING");
  // It waits for the GPU workers it asks for.
  EXPECT_TRUE(absl::StrContains(job.value("reason", ""), "cuda")) << job.dump();
}

// The example Job under the users file the chart renders (its default values):
// the coordinator runs as the chart starts it (its --users, --work-dir,
// --shared-dir), the spec is submitted with the token of the admin the chart
// generates, the model and data lie where the example's comments copy them,
// and every path of the spec resolves in the admin's area. The Job dials the
// chart's coordinator Service with the key of the chart's token Secret.
TEST(DeployExamplesTest, KubernetesJobAcceptedUnderTheChartsUsersFile) {
  if (!std::filesystem::exists(Helm())) GTEST_SKIP() << "no " << Helm();
  const std::string example = SourceDir() + "/examples/k8s-job.yaml";
  std::string spec, comments;
  std::vector<std::string> job_args;
  std::string token_secret, token_key;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(example)) {
    if (doc["kind"].as<std::string>() == "ConfigMap")
      spec = doc["data"]["job.yaml"].as<std::string>();
    if (doc["kind"].as<std::string>() == "Job") {
      const YAML::Node pod = doc["spec"]["template"]["spec"];
      job_args = pod["containers"][0]["args"].as<std::vector<std::string>>();
      for (const YAML::Node& volume : pod["volumes"]) {
        if (volume["secret"]) {
          token_secret = volume["secret"]["secretName"].as<std::string>();
          token_key = volume["secret"]["items"][0]["key"].as<std::string>();
        }
      }
    }
  }
  ASSERT_FALSE(spec.empty());
  Cluster c("deploy_examples_chart");
  const std::filesystem::path dir = c.dir();
  const std::vector<YAML::Node> docs = Render(dir, "");
  ASSERT_FALSE(docs.empty());

  // The Job reaches the chart's coordinator with a token the chart wrote.
  const YAML::Node coordinator = Container(docs, "streambp-coordinator");
  const std::vector<std::string> coordinator_args = Args(coordinator);
  const std::string listen = Flag(coordinator_args, "--listen");
  EXPECT_EQ(Flag(job_args, "--coordinator"),
            "streambp-coordinator:" + listen.substr(listen.rfind(':') + 1));
  const std::string admin_token = SecretValue(docs, token_secret, token_key);
  ASSERT_FALSE(admin_token.empty()) << "the chart writes no " << token_secret << "/" << token_key;

  // The coordinator as the chart starts it, its paths in this directory.
  const std::string users = SecretValue(docs, "streambp-users", "users.yaml");
  ASSERT_FALSE(users.empty());
  WriteFile(dir / "users.yaml", users);
  WriteFile(dir / "admin.token", admin_token);
  std::vector<std::string> argv = {BinaryDir() + "/bin/sbp-coordinator"};
  for (const std::string& a : coordinator_args) {
    if (absl::StartsWith(a, "--metrics-listen") || absl::StartsWith(a, "--tls-")) continue;
    argv.push_back(Localize(a, dir,
                            {{"--listen=", "--listen=" + c.address()},
                             {"--db=", "--db=" + (dir / "chart.db").string()},
                             {"--users=", "--users=" + (dir / "users.yaml").string()}}));
  }
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--users=" + (dir / "users.yaml").string()),
            argv.end())
      << "the chart's coordinator runs without --users";
  std::filesystem::create_directories(dir / "shared");
  Process server(argv, dir, dir / "chart-coordinator.log");
  auto sbp = [&](const std::string& args) { return c.Sbp(args, "admin.token"); };
  ASSERT_TRUE(WaitFor([&] { return sbp("list").exit_code == 0; }, seconds(20)))
      << ReadAll((dir / "chart-coordinator.log").string());
  EXPECT_NE(sbp("whoami").out.find("admin"), std::string::npos) << sbp("whoami").out;

  // The model and data where the example's comments copy them: a tiny model
  // under the name of the real one, so that admission plans from its config.
  std::set<std::string> copied;
  static const std::regex kCopy(R"(kubectl -n streambp cp \S+ streambp-worker-0:(/shared/\S+))");
  const std::string text = ReadAll(example);
  for (std::sregex_iterator it(text.begin(), text.end(), kCopy), end; it != end; ++it) {
    copied.insert((*it)[1].str());
  }
  ASSERT_EQ(copied.size(), 2u) << "expected the kubectl cp of a model and of data";
  const YAML::Node job = YAML::Load(spec);
  for (const std::string field : {"model", "data"}) {
    const std::string in_area = "/shared/admin/" + job[field].as<std::string>();
    EXPECT_TRUE(copied.count(in_area))
        << field << " resolves to " << in_area
        << ", not where the comments copy it: " << absl::StrJoin(copied, ", ");
  }
  for (const std::string& path : copied) {
    const std::filesystem::path local = dir / path.substr(1);
    std::filesystem::create_directories(local.parent_path());
    if (absl::StrContains(path, "/models/")) {
      const CommandResult init = RunCommand(
          SbpBinary() + " model init --preset tiny-qwen3 --seed 1 --out '" + local.string() + "'",
          dir);
      ASSERT_EQ(init.exit_code, 0) << init.err;
    } else {
      std::filesystem::copy_file(dir / "data.jsonl", local);
    }
  }
  EXPECT_TRUE(absl::StartsWith(job["checkpoint"]["dir"].as<std::string>(), "runs/"))
      << "checkpoint.dir must be relative: it resolves in the owner's area";

  const CommandResult submit = sbp("submit " + c.WriteSpec("k8s-job-chart", spec) + " -o json");
  ASSERT_EQ(submit.exit_code, 0) << submit.err << ReadAll((dir / "chart-coordinator.log").string());
  const nlohmann::json submitted = nlohmann::json::parse(submit.out, nullptr, false);
  ASSERT_TRUE(submitted.is_object()) << submit.out;
  EXPECT_TRUE(absl::StrContains(submitted.value("reason", ""), "cuda")) << submitted.dump();

  // The rules are on: the same spec writing outside the admin's area is refused.
  const CommandResult outside = sbp(
      "submit " +
      c.WriteSpec("k8s-job-outside",
                  absl::StrReplaceAll(spec, {{"dir: runs/qwen3-sft-32k", "dir: ../alice/runs"}})) +
      " -o json");
  EXPECT_NE(outside.exit_code, 0) << outside.out;
  EXPECT_TRUE(absl::StrContains(outside.err, "checkpoint.dir")) << outside.err;
}

// worker.memory as operators write it, rendered by the chart, read by
// sbp-worker's parser: the bytes Kubernetes means by each quantity.
TEST(DeployExamplesTest, ChartWorkerMemoryIsWhatSbpWorkerReads) {
  if (!std::filesystem::exists(Helm())) GTEST_SKIP() << "no " << Helm();
  const std::filesystem::path dir = FreshDir("deploy_examples_memory");
  const std::vector<std::pair<std::string, double>> quantities = {{"72Gi", 72.0 * (1 << 30)},
                                                                  {"500Mi", 500.0 * (1 << 20)},
                                                                  {"1.5Gi", 1.5 * (1 << 30)},
                                                                  {"64G", 64e9},
                                                                  {"500M", 500e6},
                                                                  {"128k", 128e3},
                                                                  {"72GiB", 72.0 * (1 << 30)},
                                                                  {"80GB", 80e9},
                                                                  {"68719476736", 68719476736.0},
                                                                  {"1e9", 1e9}};
  for (const auto& [given, bytes] : quantities) {
    const std::vector<YAML::Node> docs = Render(
        dir, "--set worker.memory=" + given + " --show-only templates/worker-statefulset.yaml");
    const std::string memory = Flag(Args(Container(docs, "streambp-worker")), "--memory");
    const absl::StatusOr<int64_t> parsed = ParseByteSize(memory);
    ASSERT_TRUE(parsed.ok()) << given << " -> --memory=" << memory << ": " << parsed.status();
    EXPECT_EQ(*parsed, static_cast<int64_t>(std::llround(bytes)))
        << given << " -> --memory=" << memory;
  }
  // Whole-node pods: each worker's host memory is its share of the pod's limit.
  const std::vector<YAML::Node> docs =
      Render(dir,
             "--set worker.resources.limits.memory=1000Gi --set worker.gpusPerNode=4 "
             "--show-only templates/worker-statefulset.yaml");
  const absl::StatusOr<int64_t> host =
      ParseByteSize(Flag(Args(Container(docs, "streambp-worker")), "--host-memory"));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(*host, int64_t{250} << 30);
}

// values-cpu.yaml's worker command line, as rendered, runs: the worker
// registers under its pod's name with the memory of its container's limit.
TEST(DeployExamplesTest, ValuesCpuWorkerRegistersAsRendered) {
  if (!std::filesystem::exists(Helm())) GTEST_SKIP() << "no " << Helm();
  Cluster c("deploy_examples_cpu");
  const std::vector<YAML::Node> docs =
      Render(c.dir(), "-f '" + SourceDir() + "/helm/streambp/values-cpu.yaml'");
  const YAML::Node container = Container(docs, "streambp-worker");
  ASSERT_TRUE(container);
  ASSERT_EQ(container["command"].as<std::vector<std::string>>(),
            std::vector<std::string>{"sbp-worker"});
  c.StartCoordinator();
  const int metrics = FreePort();
  std::vector<std::string> argv = {BinaryDir() + "/bin/sbp-worker"};
  for (const std::string& a : Args(container)) {
    argv.push_back(
        Localize(absl::StrReplaceAll(a, {{"$(POD_NAME)", "streambp-worker-0"}}), c.dir(),
                 {{"--coordinator=", "--coordinator=" + c.address()},
                  {"--token-file=", "--token-file=" + (c.dir() / "worker.token").string()},
                  {"--metrics-listen=", absl::StrCat("--metrics-listen=127.0.0.1:", metrics)}}));
  }
  std::filesystem::create_directories(c.dir() / "shared");
  Process worker(argv, c.dir(), c.dir() / "cpu-worker.log", {{"OMP_NUM_THREADS", "1"}});
  nlohmann::json listed;
  EXPECT_TRUE(WaitFor(
      [&] {
        listed = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
        return listed.is_object() && listed.contains("workers") && !listed["workers"].empty();
      },
      seconds(20)))
      << ReadAll((c.dir() / "cpu-worker.log").string());
  ASSERT_TRUE(listed.is_object() && listed.contains("workers") && !listed["workers"].empty());
  const nlohmann::json& w = listed["workers"][0];
  EXPECT_EQ(w.value("name", ""), "streambp-worker-0");
  EXPECT_EQ(Cluster::Int(w["memory_bytes"]), int64_t{4} << 30) << w.dump();
  EXPECT_FALSE(HttpGet(metrics, "/metrics").empty());
}

// A whole-node pod's command (bash sbp-workers, one sbp-worker per GPU),
// run here with the real sbp-worker on the CPU (--device=cpu in place of
// cuda:<i>): every worker registers under its own name, and SIGTERM to the
// launcher stops each of them and ends it with status 0.
TEST(DeployExamplesTest, WholeNodeLauncherRunsOneRealWorkerPerGpu) {
  if (!std::filesystem::exists(Helm())) GTEST_SKIP() << "no " << Helm();
  Cluster c("deploy_examples_whole_node");
  const std::vector<YAML::Node> docs = Render(c.dir(), "--set worker.gpusPerNode=3");
  const YAML::Node container = Container(docs, "streambp-worker");
  ASSERT_TRUE(container);
  const std::vector<std::string> command = container["command"].as<std::vector<std::string>>();
  ASSERT_EQ(command.size(), 2u);
  EXPECT_EQ(command[0], "/bin/bash");
  c.StartCoordinator();
  std::vector<std::string> argv = {"/bin/bash",
                                   SourceDir() + "/helm/streambp/files/sbp-workers.sh"};
  for (const std::string& a : Args(container)) {
    std::string arg = absl::StrReplaceAll(a, {{"$(POD_NAME)", "streambp-worker-0"}});
    if (arg == "sbp-worker") arg = BinaryDir() + "/bin/sbp-worker";
    if (absl::StartsWith(arg, "--device=cuda:")) arg = "--device=cpu";
    if (absl::StartsWith(arg, "--memory=")) arg = "--memory=1GiB";
    if (absl::StartsWith(arg, "--host-memory=")) arg = "--host-memory=1GiB";
    if (absl::StartsWith(arg, "--metrics-listen=")) {
      arg = absl::StrCat("--metrics-listen=127.0.0.1:", FreePort());
    }
    argv.push_back(
        Localize(arg, c.dir(),
                 {{"--coordinator=", "--coordinator=" + c.address()},
                  {"--token-file=", "--token-file=" + (c.dir() / "worker.token").string()}}));
  }
  std::filesystem::create_directories(c.dir() / "shared");
  Process launcher(argv, c.dir(), c.dir() / "launcher.log", {{"OMP_NUM_THREADS", "1"}});
  std::set<std::string> names;
  EXPECT_TRUE(WaitFor(
      [&] {
        const nlohmann::json listed =
            nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
        names.clear();
        if (listed.is_object() && listed.contains("workers")) {
          for (const auto& w : listed["workers"]) names.insert(w.value("name", ""));
        }
        return names.size() == 3;
      },
      seconds(30)))
      << ReadAll((c.dir() / "launcher.log").string());
  EXPECT_EQ(names, (std::set<std::string>{"streambp-worker-0-gpu0", "streambp-worker-0-gpu1",
                                          "streambp-worker-0-gpu2"}));
  launcher.Kill(SIGTERM);
  EXPECT_EQ(launcher.exit_code(), 0) << ReadAll((c.dir() / "launcher.log").string());
}

}  // namespace
}  // namespace sbp::testing
