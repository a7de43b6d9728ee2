#include "server/rpc_guard.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace sbp::server {
namespace {

// Worker calls that wait (up to their wait_seconds) for something to happen.
constexpr absl::string_view kLongPolls[] = {
    "streambp.v1.WorkerService/GetAssignment",
    "streambp.v1.RendezvousService/Wait",
};

// Threads the lanes must leave to the short worker calls at the least.
constexpr int kMinWorkerThreads = 8;

}  // namespace

std::optional<absl::string_view> AuthorizationHeader(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

std::string PeerHost(absl::string_view peer) {
  absl::string_view rest = peer;
  if (absl::ConsumePrefix(&rest, "ipv4:") || absl::ConsumePrefix(&rest, "ipv6:")) {
    const size_t colon = rest.rfind(':');
    if (colon != absl::string_view::npos) rest = rest.substr(0, colon);
    absl::ConsumePrefix(&rest, "[");
    absl::ConsumeSuffix(&rest, "]");
    // URI escaping of IPv6 zone ids ("%25") is left as gRPC wrote it.
    return std::string(rest);
  }
  return std::string(peer);  // "unix:/path" and the like: the whole name
}

absl::StatusOr<RpcLimits> RpcLimits::Resolved() const {
  RpcLimits out = *this;
  auto positive = [](int value, absl::string_view field) -> absl::Status {
    if (value >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be at least 1 (got ", value, ")"));
  };
  if (out.max_threads < 4 * kMinWorkerThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_threads: must be at least ", 4 * kMinWorkerThreads, " (got ", out.max_threads, ")"));
  }
  if (out.max_client_calls == 0) out.max_client_calls = out.max_threads / 4;
  if (out.max_long_polls == 0) out.max_long_polls = out.max_threads / 2;
  for (const auto& [value, field] :
       {std::pair{out.max_client_calls, "max_client_calls"},
        std::pair{out.max_long_polls, "max_long_polls"}, std::pair{out.max_streams, "max_streams"},
        std::pair{out.max_streams_per_client, "max_streams_per_client"},
        std::pair{out.max_reflection_streams, "max_reflection_streams"}}) {
    if (absl::Status s = positive(value, field); !s.ok()) return s;
  }
  if (out.max_client_calls + out.max_long_polls > out.max_threads - kMinWorkerThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_client_calls + max_long_polls: ", out.max_client_calls, " + ", out.max_long_polls,
        " leave fewer than ", kMinWorkerThreads, " of max_threads ", out.max_threads,
        " for worker heartbeats; raise max_threads or lower them"));
  }
  return out;
}

RpcGuard::RpcGuard(const Authenticator* auth, Metrics* metrics, RpcLimits limits)
    : auth_(auth), metrics_(metrics), limits_(std::move(limits)) {}

RpcGuard::Lane RpcGuard::LaneOf(Role role, absl::string_view method) {
  if (role == Role::kClient) return Lane::kClient;
  for (absl::string_view long_poll : kLongPolls) {
    if (method == long_poll) return Lane::kLongPoll;
  }
  return Lane::kWorker;
}

RpcGuard::CallTicket::CallTicket(const RpcGuard* guard, Lane lane) : lane_(lane) {
  std::atomic<int>* counter = nullptr;
  int limit = 0;
  switch (lane) {
    case Lane::kClient:
      counter = &guard->client_calls_;
      limit = guard->limits_.max_client_calls;
      break;
    case Lane::kLongPoll:
      counter = &guard->long_polls_;
      limit = guard->limits_.max_long_polls;
      break;
    case Lane::kWorker:
      // Unlimited: these calls are short, and what the other lanes leave is theirs.
      admitted_ = true;
      return;
  }
  if (counter->fetch_add(1, std::memory_order_acq_rel) < limit) {
    counter_ = counter;
    admitted_ = true;
  } else {
    counter->fetch_sub(1, std::memory_order_acq_rel);
  }
}

RpcGuard::CallTicket::~CallTicket() {
  if (counter_ != nullptr) counter_->fetch_sub(1, std::memory_order_acq_rel);
}

absl::Status RpcGuard::LaneFull(Lane lane, absl::string_view method) const {
  if (lane == Lane::kLongPoll) {
    return absl::ResourceExhaustedError(
        absl::StrCat(method, ": the coordinator already holds ", limits_.max_long_polls,
                     " waiting worker calls (--max-threads sets the limit); retry shortly"));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(method, ": the coordinator is already serving ", limits_.max_client_calls,
                   " client calls (--max-threads sets the limit); retry shortly"));
}

absl::StatusOr<Identity> RpcGuard::Authorize(const grpc::ServerContextBase& context, Role role,
                                             absl::string_view method) const {
  return auth_->Authorize(AuthorizationHeader(context), role, method);
}

grpc::Status RpcGuard::Finish(absl::string_view method, const absl::Status& status) const {
  Record(method, status);
  return ToGrpcStatus(status);
}

RpcGuard::StreamSlot& RpcGuard::StreamSlot::operator=(StreamSlot&& other) noexcept {
  if (this != &other) {
    Release();
    guard_ = std::exchange(other.guard_, nullptr);
    kind_ = other.kind_;
    client_ = std::move(other.client_);
  }
  return *this;
}

void RpcGuard::StreamSlot::Release() {
  if (guard_ == nullptr) return;
  guard_->CloseStream(kind_, client_);
  guard_ = nullptr;
}

absl::StatusOr<RpcGuard::StreamSlot> RpcGuard::OpenStream(StreamKind kind,
                                                          const grpc::ServerContextBase& context,
                                                          const Identity* caller) const {
  // Per identity where the caller has one: users behind one address (a NAT,
  // a node's pods) do not share a limit; per address for the unauthenticated.
  std::string client = caller != nullptr ? absl::StrCat("identity ", caller->name)
                                         : absl::StrCat("address ", PeerHost(context.peer()));
  absl::MutexLock lock(&streams_mu_);
  if (streams_ >= limits_.max_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordinator already has ", streams_,
                     " open streams (--max-streams); close some or retry later"));
  }
  if (kind == StreamKind::kReflection && reflection_streams_ >= limits_.max_reflection_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordinator already has ", reflection_streams_,
                     " open reflection streams (--max-reflection-streams); retry later"));
  }
  int& mine = streams_by_client_[client];
  if (mine >= limits_.max_streams_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        client, " already has ", mine,
        " open streams (--max-streams-per-client, per identity or, without a token, per "
        "address); close some watches or retry later"));
  }
  ++mine;
  ++streams_;
  if (kind == StreamKind::kReflection) ++reflection_streams_;
  StreamSlot slot;
  slot.guard_ = this;
  slot.kind_ = kind;
  slot.client_ = std::move(client);
  return slot;
}

void RpcGuard::CloseStream(StreamKind kind, const std::string& client) const {
  absl::MutexLock lock(&streams_mu_);
  --streams_;
  if (kind == StreamKind::kReflection) --reflection_streams_;
  auto it = streams_by_client_.find(client);
  if (it != streams_by_client_.end() && --it->second <= 0) streams_by_client_.erase(it);
}

int RpcGuard::open_streams() const {
  absl::MutexLock lock(&streams_mu_);
  return streams_;
}

void RpcGuard::Record(absl::string_view method, const absl::Status& status) const {
  metrics_->CountRequest(method, absl::StatusCodeToString(status.code()));
  if (status.code() == absl::StatusCode::kInternal ||
      status.code() == absl::StatusCode::kDataLoss || status.code() == absl::StatusCode::kUnknown) {
    LOG(ERROR) << method << ": " << status;
  } else if (!status.ok()) {
    LOG(DEBUG) << method << ": " << status;
  }
}

}  // namespace sbp::server
