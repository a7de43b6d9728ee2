// TLS end to end: a coordinator serving a self-signed certificate, a worker and
// the CLI trusting it with --tls-ca; a job runs to success. A client without
// the CA cannot talk to it. A certificate rotated in place (as cert-manager
// renews it) is served without a restart. Skips when openssl is not installed.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

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
  EXPECT_EQ(c.State(id), "SUCCEEDED");

  // Plaintext against a TLS port fails as UNAVAILABLE.
  c.set_cli_flags("");
  const CommandResult plain = c.Sbp("list");
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_NE(plain.err.find("UNAVAILABLE"), std::string::npos) << plain.err;
  // A missing CA file is a usage error.
  c.set_cli_flags(" --tls-ca nope.pem");
  EXPECT_EQ(c.Sbp("list").exit_code, 2);
}

// A self-signed certificate and key for localhost, written under `name`.pem and
// `name`-key.pem in `dir`.
void MakeCertificate(const std::filesystem::path& dir, const std::string& name) {
  const CommandResult made = RunCommand(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
          name + "-key.pem -out " + name + ".pem",
      dir);
  ASSERT_EQ(made.exit_code, 0) << made.err;
}

TEST(TlsTest, ARotatedCertificateIsServedWithoutARestart) {
  if (!std::filesystem::exists("/usr/bin/openssl")) GTEST_SKIP() << "no openssl";
  Cluster c("tls-rotate");
  namespace fs = std::filesystem;
  MakeCertificate(c.dir(), "old");
  MakeCertificate(c.dir(), "new");
  fs::copy_file(c.dir() / "old.pem", c.dir() / "cert.pem");
  fs::copy_file(c.dir() / "old-key.pem", c.dir() / "key.pem");
  c.set_cli_flags(" --tls-ca old.pem");
  c.StartCoordinator(
      3, {"--tls-cert", "cert.pem", "--tls-key", "key.pem", "--tls-refresh-seconds", "1"});
  ASSERT_EQ(c.Sbp("list").exit_code, 0) << c.Logs();
  c.set_cli_flags(" --tls-ca new.pem");
  EXPECT_EQ(c.Sbp("list").exit_code, 1) << "the new certificate is not served yet";

  // The renewal replaces both files in place, each by a rename.
  fs::copy_file(c.dir() / "new-key.pem", c.dir() / "key.pem.next");
  fs::copy_file(c.dir() / "new.pem", c.dir() / "cert.pem.next");
  fs::rename(c.dir() / "key.pem.next", c.dir() / "key.pem");
  fs::rename(c.dir() / "cert.pem.next", c.dir() / "cert.pem");

  // New connections get the new certificate within a few refresh periods.
  bool served = false;
  for (int i = 0; i < 40 && !served; ++i) {
    served = c.Sbp("list").exit_code == 0;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(served) << "the rotated certificate was not served within 10 s" << c.Logs();
  c.set_cli_flags(" --tls-ca old.pem");
  EXPECT_EQ(c.Sbp("list").exit_code, 1) << "the old certificate is still served";
}

}  // namespace
}  // namespace sbp::testing
