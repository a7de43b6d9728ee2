// The users file: parsing with errors that name the entry and field, token
// lookup by SHA-256, the token-file shorthand, and reloads that replace the
// table whole or keep the old one when the new file is broken.
#include "server/identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/server/test_util.h"

namespace sbp::server {
namespace {

using ::testing::HasSubstr;

std::string UsersYaml(const std::string& alice_token, const std::string& bob_token) {
  return absl::StrCat(
      "users:\n  - name: alice\n    role: user\n    token_sha256: [", TokenSha256(alice_token),
      "]\n    quota: {max_running_workers: 1, max_pending_jobs: 2, max_priority: 5}\n"
      "  - name: bob\n    token_sha256: [",
      TokenSha256(bob_token), "]\n  - name: ops\n    role: admin\n    token_sha256: [",
      TokenSha256("ops-secret"), "]\nworkers:\n  - name: pool-a\n    token_sha256: [",
      TokenSha256("worker-secret"), "]\n");
}

TEST(IdentityTest, Sha256IsTheStandardDigest) {
  EXPECT_EQ(TokenSha256("test"),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
}

TEST(IdentityTest, LooksUpEachRoleByItsToken) {
  auto table = IdentityTable::Parse(UsersYaml("alice-secret", "bob-secret"), "users.yaml");
  ASSERT_TRUE(table.ok()) << table.status();
  IdentityDirectory directory(*std::move(table));
  const auto alice = directory.Lookup("alice-secret");
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->role, IdentityRole::kUser);
  EXPECT_EQ(alice->quota.max_running_workers, 1);
  EXPECT_EQ(alice->quota.max_pending_jobs, 2);
  EXPECT_EQ(alice->quota.max_priority, 5);
  EXPECT_EQ(directory.Lookup("bob-secret")->quota.max_priority, std::nullopt);
  EXPECT_TRUE(directory.Lookup("ops-secret")->is_admin());
  EXPECT_TRUE(directory.Lookup("worker-secret")->is_worker());
  EXPECT_FALSE(directory.Lookup("nobody").has_value());
  EXPECT_FALSE(directory.Lookup("").has_value());
  EXPECT_TRUE(directory.HasRole(IdentityRole::kWorker));
}

TEST(IdentityTest, ErrorsNameTheEntryAndField) {
  auto error = [](const std::string& yaml) {
    return std::string(IdentityTable::Parse(yaml, "users.yaml").status().message());
  };
  EXPECT_THAT(
      error("users:\n  - name: a\n    role: root\n    token_sha256: [" + TokenSha256("x") + "]\n"),
      HasSubstr("users.yaml: users[0].role: must be user or admin"));
  EXPECT_THAT(error("users:\n  - name: a\n    token_sha256: [abc]\n"),
              HasSubstr("users[0].token_sha256[0]: must be 64 hex digits"));
  EXPECT_THAT(error("users:\n  - role: user\n    token_sha256: [" + TokenSha256("x") + "]\n"),
              HasSubstr("users[0].name"));
  EXPECT_THAT(error("users:\n  - name: a\n    token_sha256: [" + TokenSha256("x") +
                    "]\n  - name: b\n    token_sha256: [" + TokenSha256("x") + "]\n"),
              HasSubstr("users[1].token_sha256[0]: this token hash is listed twice"));
  EXPECT_THAT(error("users:\n  - name: a\n    token: plain\n"), HasSubstr("unknown key 'token'"));
  EXPECT_THAT(error("users: [\n"), HasSubstr("not valid YAML"));
  // Names that are a directory's "." or "..", or that start with one.
  for (const char* name : {".", "..", "...", ".alice", "-alice", "_alice"}) {
    EXPECT_THAT(error(absl::StrCat("users:\n  - name: '", name, "'\n    token_sha256: [",
                                   TokenSha256("x"), "]\n")),
                HasSubstr("users[0].name: '" + std::string(name) + "' is not a name"))
        << name;
  }
  EXPECT_THAT(
      error(absl::StrCat("workers:\n  - name: '..'\n    token_sha256: [", TokenSha256("x"), "]\n")),
      HasSubstr("workers[0].name"));
  EXPECT_TRUE(IdentityTable::Parse(absl::StrCat("users:\n  - name: a.b-c_1\n    token_sha256: [",
                                                TokenSha256("x"), "]\n"),
                                   "users.yaml")
                  .ok());
  EXPECT_THAT(error("users:\n  - name: a\n    token_sha256: [" + TokenSha256("x") +
                    "]\n    quota: {max_pending_jobs: -1}\n"),
              HasSubstr("users[0].quota.max_pending_jobs: must be a non-negative integer"));
}

TEST(IdentityTest, TokenFilesAreAnAdminAndAWorker) {
  IdentityDirectory directory(IdentityTable::FromTokens("client", "worker"));
  EXPECT_TRUE(directory.Lookup("client")->is_admin());
  EXPECT_TRUE(directory.Lookup("worker")->is_worker());
  IdentityDirectory open(IdentityTable::FromTokens("", ""));
  EXPECT_FALSE(open.HasRole(IdentityRole::kUser));
  EXPECT_FALSE(open.HasRole(IdentityRole::kWorker));
}

TEST(IdentityTest, ReloadSwapsTheTableOrKeepsTheOldOne) {
  const std::string path = testing::FreshDir("identity_reload").string() + "/users.yaml";
  std::ofstream(path) << UsersYaml("alice-1", "bob-1");
  auto table = LoadIdentityFile(path);
  ASSERT_TRUE(table.ok()) << table.status();
  IdentityDirectory directory(*std::move(table), path);
  EXPECT_TRUE(directory.Lookup("alice-1").has_value());
  EXPECT_TRUE(directory.ReloadIfChanged().ok());  // unchanged: nothing to do

  std::ofstream(path, std::ios::trunc) << UsersYaml("alice-2", "bob-1");  // alice's token rotated
  ASSERT_TRUE(directory.ReloadIfChanged().ok());
  EXPECT_FALSE(directory.Lookup("alice-1").has_value());
  EXPECT_TRUE(directory.Lookup("alice-2").has_value());

  std::ofstream(path, std::ios::trunc) << "users: [broken\n";
  EXPECT_FALSE(directory.ReloadIfChanged().ok());
  EXPECT_TRUE(directory.Lookup("alice-2").has_value()) << "a broken file keeps the old table";
  EXPECT_TRUE(directory.ReloadIfChanged().ok()) << "reported once, not on every check";
}

}  // namespace
}  // namespace sbp::server
