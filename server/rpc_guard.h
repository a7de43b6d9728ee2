// What every handler does around its body: check the bearer token for the
// method's role, admit the call under the coordinator's concurrency limits,
// run the body, count the request by method and code, and map the result to a
// grpc::Status (through ToGrpcStatus, the only mapping).
//
// Why the limits look like this. The coordinator serves unary calls with the
// gRPC sync server, whose handler threads come from one pool bounded by
// grpc::ResourceQuota::SetMaxThreads (RpcLimits::max_threads). A call that
// finds no thread left is refused by gRPC itself with RESOURCE_EXHAUSTED, and
// that refusal does not look at who is calling: a worker's Heartbeat would be
// refused as readily as anyone's. So nothing that a client can open in
// numbers may hold a pool thread for long:
//   - Server streams (JobService/Watch, server reflection) are callback
//     handlers: an open stream holds no thread at all, only a StreamSlot here,
//     capped per client address, for reflection (which needs no token), and
//     overall.
//   - Unary calls hold a thread while they run. JobService calls together may
//     hold at most max_client_calls of them, and the workers' long polls
//     (GetAssignment, RendezvousService/Wait) at most max_long_polls; beyond
//     that a call is answered RESOURCE_EXHAUSTED at once, which frees its
//     thread in microseconds.
// What remains of the pool, max_threads - max_client_calls - max_long_polls,
// is always there for the short worker calls (Heartbeat, ReportProgress,
// Finish, Register, rendezvous Set/Get), so a busy coordinator never lets a
// lease expire for want of a thread.
#pragma once

#include <grpcpp/server_context.h>

#include <atomic>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/status_mapping.h"

namespace sbp::server {

// The value of the request's "authorization" metadata, if any.
std::optional<absl::string_view> AuthorizationHeader(const grpc::ServerContextBase& context);

// The caller's address without the port ("127.0.0.1", "::1"), from
// grpc::ServerContextBase::peer() ("ipv4:127.0.0.1:5400", "ipv6:[::1]:5400").
// Client and worker tokens are each shared by a whole role, so the address is
// what tells one client from another.
std::string PeerHost(absl::string_view peer);

struct RpcLimits {
  int max_threads = 256;  // sync server threads (grpc::ResourceQuota::SetMaxThreads)
  // Unary JobService calls in flight; 0: max_threads / 4.
  int max_client_calls = 0;
  // Workers' long polls in flight (GetAssignment, RendezvousService/Wait);
  // 0: max_threads / 2. Each worker holds at most two.
  int max_long_polls = 0;
  int max_streams = 4096;             // open Watch and reflection streams, all clients
  int max_streams_per_client = 1024;  // of them, of one identity (reflection: one address)
  int max_reflection_streams = 256;   // of them, server reflection (needs no token)

  // The limits with the derived defaults filled in; InvalidArgument naming the
  // field when they cannot work (the lanes must leave threads for workers).
  absl::StatusOr<RpcLimits> Resolved() const;
};

enum class StreamKind { kWatch, kReflection };

class RpcGuard {
 public:
  // `limits` must be Resolved().
  RpcGuard(const Authenticator* auth, Metrics* metrics, RpcLimits limits);

  template <typename Body>
  grpc::Status Run(const grpc::ServerContextBase& context, Role role, absl::string_view method,
                   Body&& body) const {
    absl::StatusOr<Identity> caller = auth_->Authorize(AuthorizationHeader(context), role, method);
    absl::Status status = caller.status();
    if (status.ok()) {
      CallTicket ticket(this, LaneOf(role, method));
      if (!ticket.admitted()) {
        status = LaneFull(ticket.lane(), method);
      } else if constexpr (std::is_invocable_v<Body, const Identity&>) {
        status = std::forward<Body>(body)(*caller);  // the body acts for the caller
      } else {
        status = std::forward<Body>(body)();
      }
    }
    Record(method, status);
    return ToGrpcStatus(status);
  }

  // For callback handlers, which cannot use Run: the token check alone (the
  // caller's identity), and the end of the call (counted and mapped as Run does).
  absl::StatusOr<Identity> Authorize(const grpc::ServerContextBase& context, Role role,
                                     absl::string_view method) const;
  grpc::Status Finish(absl::string_view method, const absl::Status& status) const;

  // One open server stream; its slot is freed on destruction.
  class StreamSlot {
   public:
    StreamSlot() = default;
    StreamSlot(StreamSlot&& other) noexcept { *this = std::move(other); }
    StreamSlot& operator=(StreamSlot&& other) noexcept;
    ~StreamSlot() { Release(); }
    void Release();

   private:
    friend class RpcGuard;
    const RpcGuard* guard_ = nullptr;
    StreamKind kind_ = StreamKind::kWatch;
    std::string client_;
  };
  // A slot for a stream of `kind` from `caller` (counted per identity
  // against max_streams_per_client) or, without one (reflection, which
  // needs no token), from the context's peer address; RESOURCE_EXHAUSTED
  // naming the limit that is full.
  absl::StatusOr<StreamSlot> OpenStream(StreamKind kind, const grpc::ServerContextBase& context,
                                        const Identity* caller = nullptr) const;

  const RpcLimits& limits() const { return limits_; }
  int open_streams() const;

 private:
  enum class Lane { kClient, kLongPoll, kWorker };
  static Lane LaneOf(Role role, absl::string_view method);

  // Holds a place in a lane for the duration of one unary call.
  class CallTicket {
   public:
    CallTicket(const RpcGuard* guard, Lane lane);
    ~CallTicket();
    CallTicket(const CallTicket&) = delete;
    CallTicket& operator=(const CallTicket&) = delete;
    bool admitted() const { return admitted_; }
    Lane lane() const { return lane_; }

   private:
    Lane lane_;
    bool admitted_ = false;
    std::atomic<int>* counter_ = nullptr;  // the lane's count to give back, if any
  };

  absl::Status LaneFull(Lane lane, absl::string_view method) const;
  void Record(absl::string_view method, const absl::Status& status) const;
  void CloseStream(StreamKind kind, const std::string& client) const;

  const Authenticator* auth_;
  Metrics* metrics_;
  RpcLimits limits_;
  mutable std::atomic<int> client_calls_{0};
  mutable std::atomic<int> long_polls_{0};

  mutable absl::Mutex streams_mu_;
  mutable int streams_ ABSL_GUARDED_BY(streams_mu_) = 0;
  mutable int reflection_streams_ ABSL_GUARDED_BY(streams_mu_) = 0;
  mutable absl::flat_hash_map<std::string, int> streams_by_client_ ABSL_GUARDED_BY(streams_mu_);
};

}  // namespace sbp::server
