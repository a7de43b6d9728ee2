#include "server/rendezvous_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp::server {
namespace {

namespace v1 = streambp::v1;

constexpr char kSet[] = "streambp.v1.RendezvousService/Set";
constexpr char kRendezvousGet[] = "streambp.v1.RendezvousService/Get";
constexpr char kWait[] = "streambp.v1.RendezvousService/Wait";
constexpr size_t kMaxKeyLength = 1024;
constexpr int kMaxWaitKeys = 4096;

absl::Status CheckKey(const std::string& key, absl::string_view field) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": is required"));
  if (key.size() > kMaxKeyLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be at most ", kMaxKeyLength, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status RendezvousServiceImpl::Set(grpc::ServerContext* context,
                                        const v1::SetKeyRequest* request,
                                        v1::SetKeyResponse* response) {
  return guard_->Run(*context, Role::kWorker, kSet, [&](const Identity& caller) -> absl::Status {
    RETURN_IF_ERROR(CheckKey(request->key(), "key"));
    RETURN_IF_ERROR(manager_->CheckRendezvousScope(request->scope(), request->worker_id(), caller));
    return store_->Set(request->scope(), request->key(), request->value());
  });
}

grpc::Status RendezvousServiceImpl::Get(grpc::ServerContext* context,
                                        const v1::GetKeyRequest* request,
                                        v1::GetKeyResponse* response) {
  return guard_->Run(
      *context, Role::kWorker, kRendezvousGet, [&](const Identity& caller) -> absl::Status {
        RETURN_IF_ERROR(CheckKey(request->key(), "key"));
        RETURN_IF_ERROR(
            manager_->CheckRendezvousScope(request->scope(), request->worker_id(), caller));
        std::optional<std::string> value = store_->Get(request->scope(), request->key());
        response->set_found(value.has_value());
        if (value) response->set_value(std::move(*value));
        return absl::OkStatus();
      });
}

grpc::Status RendezvousServiceImpl::Wait(grpc::ServerContext* context,
                                         const v1::WaitKeysRequest* request,
                                         v1::WaitKeysResponse* response) {
  return guard_->Run(*context, Role::kWorker, kWait, [&](const Identity& caller) -> absl::Status {
    if (request->keys().empty()) return absl::InvalidArgumentError("keys: is required");
    if (request->keys_size() > kMaxWaitKeys) {
      return absl::InvalidArgumentError(absl::StrCat("keys: at most ", kMaxWaitKeys, " per call"));
    }
    for (const std::string& key : request->keys()) RETURN_IF_ERROR(CheckKey(key, "keys"));
    if (request->timeout_ms() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("timeout_ms: must not be negative (got ", request->timeout_ms(), ")"));
    }
    RETURN_IF_ERROR(manager_->CheckRendezvousScope(request->scope(), request->worker_id(), caller));
    const std::vector<std::string> keys(request->keys().begin(), request->keys().end());
    const int timeout_ms = std::min(request->timeout_ms(), kMaxWaitMs);
    response->set_ready(store_->Wait(request->scope(), keys, absl::Milliseconds(timeout_ms),
                                     [context] { return context->IsCancelled(); }));
    return absl::OkStatus();
  });
}

}  // namespace sbp::server
