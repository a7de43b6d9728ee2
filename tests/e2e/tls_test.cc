// TLS end to end: a coordinator serving a self-signed certificate, a worker and
// the CLI trusting it with --tls-ca; a job runs to success. A client without
// the CA cannot talk to it. Skips when openssl is not installed.
#include <gtest/gtest.h>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

TEST(TlsTest, WorkerAndCliTalkTlsToTheCoordinator) {
  if (!std::filesystem::exists("/usr/bin/openssl")) GTEST_SKIP() << "no openssl";
  Cluster c("tls");
  const CommandResult cert = RunCommand(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout key.pem -out cert.pem",
      c.dir());
  ASSERT_EQ(cert.exit_code, 0) << cert.err;
  c.set_cli_flags(" --tls-ca cert.pem");
  c.StartCoordinator(3, {"--tls-cert", "cert.pem", "--tls-key", "key.pem"});
  c.StartWorker("w0", {"--tls-ca", (c.dir() / "cert.pem").string()});
  const std::string id = c.Submit(c.WriteSpec("secure", c.Spec("secure", 3, 2, 0)));
  ASSERT_FALSE(id.empty()) << c.Logs();
  const CommandResult watch = c.Sbp("watch " + id);
  EXPECT_EQ(watch.exit_code, 0) << watch.err << c.Logs();
  EXPECT_EQ(c.State(id), "JOB_STATE_SUCCEEDED");

  // Plaintext against a TLS port fails as UNAVAILABLE.
  c.set_cli_flags("");
  const CommandResult plain = c.Sbp("list");
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_NE(plain.err.find("UNAVAILABLE"), std::string::npos) << plain.err;
  // A missing CA file is a usage error.
  c.set_cli_flags(" --tls-ca nope.pem");
  EXPECT_EQ(c.Sbp("list").exit_code, 2);
}

}  // namespace
}  // namespace sbp::testing
