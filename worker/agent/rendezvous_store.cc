#include "worker/agent/rendezvous_store.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "worker/agent/coordinator_channel.h"

namespace sbp {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kRpcTimeout{10000};
// One Wait call blocks at the coordinator for at most this long, so that a
// lost coordinator is noticed and the overall timeout is honoured.
constexpr std::chrono::milliseconds kWaitSlice{5000};

[[noreturn]] void Fail(const std::string& what, const grpc::Status& status) {
  throw gloo::IoException(
      absl::StrCat("rendezvous ", what, ": ", FromGrpcStatus(status).message()));
}

}  // namespace

CoordinatorRendezvousStore::CoordinatorRendezvousStore(
    std::shared_ptr<streambp::v1::RendezvousService::StubInterface> stub, std::string token,
    std::string scope, std::chrono::milliseconds timeout, std::string worker_id)
    : stub_(std::move(stub)),
      token_(std::move(token)),
      scope_(std::move(scope)),
      worker_id_(std::move(worker_id)),
      timeout_(timeout) {}

void CoordinatorRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  streambp::v1::SetKeyRequest request;
  request.set_scope(scope_);
  request.set_worker_id(worker_id_);
  request.set_key(key);
  request.set_value(std::string(data.begin(), data.end()));
  streambp::v1::SetKeyResponse response;
  grpc::ClientContext context;
  PrepareContext(context, token_, kRpcTimeout);
  const grpc::Status status = stub_->Set(&context, request, &response);
  if (!status.ok()) Fail(absl::StrCat("set '", key, "'"), status);
}

std::vector<char> CoordinatorRendezvousStore::get(const std::string& key) {
  wait({key});
  streambp::v1::GetKeyRequest request;
  request.set_scope(scope_);
  request.set_worker_id(worker_id_);
  request.set_key(key);
  streambp::v1::GetKeyResponse response;
  grpc::ClientContext context;
  PrepareContext(context, token_, kRpcTimeout);
  const grpc::Status status = stub_->Get(&context, request, &response);
  if (!status.ok()) Fail(absl::StrCat("get '", key, "'"), status);
  if (!response.found()) {
    throw gloo::IoException(absl::StrCat("rendezvous get '", key, "': not found in ", scope_));
  }
  return std::vector<char>(response.value().begin(), response.value().end());
}

void CoordinatorRendezvousStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void CoordinatorRendezvousStore::wait(const std::vector<std::string>& keys,
                                      const std::chrono::milliseconds& timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      throw gloo::IoException(absl::StrCat("rendezvous in ", scope_, ": timed out after ",
                                           timeout.count(),
                                           " ms waiting for the other ranks to join"));
    }
    streambp::v1::WaitKeysRequest request;
    request.set_scope(scope_);
    request.set_worker_id(worker_id_);
    for (const std::string& key : keys) request.add_keys(key);
    request.set_timeout_ms(static_cast<int32_t>(std::min(left, kWaitSlice).count()));
    streambp::v1::WaitKeysResponse response;
    grpc::ClientContext context;
    PrepareContext(context, token_, kWaitSlice + kRpcTimeout);
    const grpc::Status status = stub_->Wait(&context, request, &response);
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
        status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // The coordinator's long-poll lane is full, or it is restarting: the
      // wait goes on until its own deadline.
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(500)));
      continue;
    }
    if (!status.ok()) Fail("wait", status);
    if (response.ready()) return;
  }
}

}  // namespace sbp
