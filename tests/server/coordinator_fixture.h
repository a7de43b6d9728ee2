// A fixture that runs a Coordinator in-process on 127.0.0.1:0 with a fresh
// SQLite file, and talks to it through real gRPC stubs.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/coordinator.h"
#include "tests/server/test_util.h"

namespace sbp::server::testing {

class CoordinatorTest : public ::testing::Test {
 protected:
  // Starts (or restarts, keeping the database) the coordinator.
  void Start(CoordinatorOptions options = {}) {
    if (dir_.empty()) {
      dir_ = FreshDir(::testing::UnitTest::GetInstance()->current_test_info()->name()).string();
    }
    options.listen = "127.0.0.1:0";
    options.db_path = dir_ + "/coordinator.db";
    coordinator_.reset();
    auto started = Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    client_ = std::make_unique<Client>(coordinator_->address(), options.client_token);
    worker_ = std::make_unique<Client>(coordinator_->address(), options.worker_token);
  }

  void TearDown() override { coordinator_.reset(); }

  // Submits a spec and returns the job id.
  std::string MustSubmit(const std::string& spec, const std::string& request_id = "") {
    v1::SubmitJobResponse response;
    grpc::Status status = client_->Submit(spec, &response, request_id);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.job().id();
  }

  v1::JobState StateOf(const std::string& id) { return client_->MustGet(id).state(); }

  std::string dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Client> client_;  // client token
  std::unique_ptr<Client> worker_;  // worker token
};

}  // namespace sbp::server::testing
