// `sbp health` against a real coordinator: SERVING (exit 0) without a token,
// exit 1 for an unknown service or a coordinator that is gone, and over TLS
// with --tls-server-name when the address is not the certificate's name (as
// the Kubernetes probes dial 127.0.0.1). Its TLS part skips without openssl.
#include <gtest/gtest.h>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

CommandResult Health(const Cluster& c, const std::string& args) {
  return RunCommand(SbpBinary() + " health --coordinator " + c.address() + " " + args, c.dir());
}

TEST(HealthCliTest, ReportsServingUntilTheCoordinatorStops) {
  Cluster c("health");
  c.StartCoordinator();
  const CommandResult serving = Health(c, "");
  EXPECT_EQ(serving.exit_code, 0) << serving.err;
  EXPECT_EQ(serving.out, "SERVING\n");

  const CommandResult unknown = Health(c, "--service no.such.Service");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("NOT_FOUND"), std::string::npos) << unknown.err;
  EXPECT_EQ(Health(c, "--tls-server-name x").exit_code, 2);  // needs --tls-ca

  c.KillCoordinator(SIGKILL);
  const CommandResult gone = Health(c, "--timeout 2");
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("UNAVAILABLE"), std::string::npos) << gone.err;
  EXPECT_EQ(gone.out, "");
}

TEST(HealthCliTest, ChecksTlsNameGivenByFlag) {
  if (!std::filesystem::exists("/usr/bin/openssl")) GTEST_SKIP() << "no openssl";
  Cluster c("health_tls");
  // Named like the Helm chart's coordinator Service, not like the address.
  const CommandResult cert = RunCommand(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=streambp-coordinator "
      "-addext subjectAltName=DNS:streambp-coordinator -keyout key.pem -out cert.pem",
      c.dir());
  ASSERT_EQ(cert.exit_code, 0) << cert.err;
  std::vector<std::string> argv = {BinaryDir() + "/bin/sbp-coordinator",
                                   "--listen",
                                   c.address(),
                                   "--db",
                                   "coordinator.db",
                                   "--tls-cert",
                                   "cert.pem",
                                   "--tls-key",
                                   "key.pem"};
  Process coordinator(argv, c.dir(), c.dir() / "coordinator.log");
  const std::string flags = "--tls-ca cert.pem --tls-server-name streambp-coordinator";
  EXPECT_TRUE(WaitFor([&] { return Health(c, flags).exit_code == 0; }, std::chrono::seconds(20)))
      << ReadAll((c.dir() / "coordinator.log").string());
  EXPECT_EQ(Health(c, flags).out, "SERVING\n");
  // The address's own name (127.0.0.1) is not in the certificate.
  const CommandResult mismatch = Health(c, "--tls-ca cert.pem --timeout 2");
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_EQ(mismatch.out, "");
  // Plaintext against the TLS port fails too.
  EXPECT_EQ(Health(c, "--timeout 2").exit_code, 1);
}

}  // namespace
}  // namespace sbp::testing
