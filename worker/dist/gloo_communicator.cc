#include "worker/dist/gloo_communicator.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "kernels/tensor.h"

namespace sbp {
namespace {

void SumDoubles(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<double*>(out);
  const auto* x = static_cast<const double*>(a);
  const auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void MaxDoubles(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<double*>(out);
  const auto* x = static_cast<const double*>(a);
  const auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = std::max(x[i], y[i]);
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

using Clock = std::chrono::steady_clock;

// What is left of a wait that must end by `deadline`; at least 1 ms, so that
// a wait past it checks once and times out (Gloo's own "Timed out" error).
std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context,
                                   const GlooOptions& options)
    : context_(std::move(context)),
      timeout_(options.timeout),
      scratch_allocator_(options.scratch_allocator) {}

GlooCommunicator::~GlooCommunicator() = default;

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Connect(
    gloo::rendezvous::Store& store, const GlooOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is not in a world of ", options.world_size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(store, device);
    return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(context, options));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", options.rank, " of ", options.world_size,
                                               ": connecting to the other ranks (listening on ",
                                               options.host, "): ", e.what()));
  }
}

int GlooCommunicator::rank() const { return context_->rank; }
int GlooCommunicator::world_size() const { return context_->size; }

template <typename Body>
absl::Status GlooCommunicator::Guard(const char* what, Body&& body) {
  if (broken_) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": an earlier collective failed; the communicator is unusable"));
  }
  try {
    body();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    broken_ = true;
    const std::string message = e.what();
    const std::string where = absl::StrCat(what, " on rank ", rank(), " of ", world_size());
    if (message.find("Timed out") != std::string::npos ||
        message.find("timed out") != std::string::npos) {
      return absl::DeadlineExceededError(absl::StrCat(where, ": a peer did not answer within ",
                                                      timeout_.count(), " ms: ", message));
    }
    return absl::UnavailableError(absl::StrCat(where, ": a peer failed: ", message));
  }
}

// Ring reduce-scatter. At step s (0 .. N-2) rank r sends chunk (r - s - 1)
// to rank r + 1 and receives chunk (r - s - 2) from rank r - 1, adding it to
// its own copy. Chunk c thus travels r+1 -> r+2 -> ... collecting one
// contribution per hop and is complete when it reaches rank c.
absl::Status GlooCommunicator::ReduceScatterSum(float* data, int64_t chunk, float* accumulator,
                                                const ComputeMark* /*after*/) {
  RETURN_IF_ERROR(RingReduceScatter(data, chunk));
  if (accumulator != nullptr) {
    const float* mine = data + static_cast<int64_t>(rank()) * chunk;
    for (int64_t i = 0; i < chunk; ++i) accumulator[i] += mine[i];
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::RingReduceScatter(float* data, int64_t chunk) {
  const int n = world_size(), r = rank();
  if (n == 1 || chunk == 0) return absl::OkStatus();
  std::vector<float> host_scratch;
  float* incoming = nullptr;
  Tensor scratch;
  if (scratch_allocator_ != nullptr) {
    absl::StatusOr<Tensor> t =
        Tensor::Empty(*scratch_allocator_, {chunk}, DType::kF32, "reduce-scatter receive buffer");
    if (!t.ok()) return t.status();
    scratch = *std::move(t);
    incoming = scratch.data<float>();
  } else {
    host_scratch.resize(static_cast<size_t>(chunk));
    incoming = host_scratch.data();
  }
  return Guard("reduce-scatter", [&] {
    const size_t chunk_bytes = static_cast<size_t>(chunk) * sizeof(float);
    auto send = context_->createUnboundBuffer(data, chunk_bytes * n);
    auto recv = context_->createUnboundBuffer(incoming, chunk_bytes);
    const uint64_t slot = context_->nextSlot();
    for (int s = 0; s < n - 1; ++s) {
      const int out = Mod(r - s - 1, n), in = Mod(r - s - 2, n);
      send->send(Mod(r + 1, n), slot, out * chunk_bytes, chunk_bytes);
      recv->recv(Mod(r - 1, n), slot, 0, chunk_bytes);
      if (!recv->waitRecv(timeout_)) throw gloo::IoException("receive aborted");
      float* mine = data + static_cast<int64_t>(in) * chunk;
      for (int64_t i = 0; i < chunk; ++i) mine[i] += incoming[i];
      if (!send->waitSend(timeout_)) throw gloo::IoException("send aborted");
    }
  });
}

// Ring all-gather in place: at step s rank r forwards chunk (r - s) to rank
// r + 1 and receives chunk (r - s - 1) from rank r - 1.
absl::Status GlooCommunicator::AllGather(void* data, int64_t chunk_bytes_signed) {
  const int n = world_size(), r = rank();
  if (n == 1 || chunk_bytes_signed == 0) return absl::OkStatus();
  return Guard("all-gather", [&] {
    const size_t chunk_bytes = static_cast<size_t>(chunk_bytes_signed);
    // Separate buffer objects for the outgoing and incoming direction: one
    // pending operation per unbound buffer.
    auto send = context_->createUnboundBuffer(data, chunk_bytes * n);
    auto recv = context_->createUnboundBuffer(data, chunk_bytes * n);
    const uint64_t slot = context_->nextSlot();
    for (int s = 0; s < n - 1; ++s) {
      const int out = Mod(r - s, n), in = Mod(r - s - 1, n);
      send->send(Mod(r + 1, n), slot, out * chunk_bytes, chunk_bytes);
      recv->recv(Mod(r - 1, n), slot, in * chunk_bytes, chunk_bytes);
      if (!recv->waitRecv(timeout_)) throw gloo::IoException("receive aborted");
      if (!send->waitSend(timeout_)) throw gloo::IoException("send aborted");
    }
  });
}

absl::Status GlooCommunicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  if (world_size() == 1 || count == 0) return absl::OkStatus();
  return Guard("all-reduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, static_cast<size_t>(count));
    opts.setReduceFunction(op == ReduceOp::kSum ? SumDoubles : MaxDoubles);
    opts.setTag(static_cast<uint32_t>(context_->nextSlot()));
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

// Every block goes straight to its rank: at step s (1 .. N-1) rank r posts
// the send of block r + s to rank r + s and the receive of block r - s from
// rank r - s, all at once; its own block is a copy. The waits share one
// deadline, so the call ends within the timeout whatever the peers do.
absl::Status GlooCommunicator::AllToAll(const void* send, void* recv, int64_t block_bytes_signed) {
  if (block_bytes_signed < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-to-all: a block of ", block_bytes_signed, " bytes"));
  }
  if (block_bytes_signed == 0) return absl::OkStatus();
  const int n = world_size(), r = rank();
  const size_t block_bytes = static_cast<size_t>(block_bytes_signed);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (n == 1) {
    std::memcpy(out, in, block_bytes);
    return absl::OkStatus();
  }
  return Guard("all-to-all", [&] {
    // Gloo's buffers are not const; the outgoing one is only read.
    auto outgoing = context_->createUnboundBuffer(const_cast<char*>(in), block_bytes * n);
    auto incoming = context_->createUnboundBuffer(out, block_bytes * n);
    const uint64_t slot = context_->nextSlot();
    for (int s = 1; s < n; ++s) {
      const int to = Mod(r + s, n), from = Mod(r - s, n);
      outgoing->send(to, slot, to * block_bytes, block_bytes);
      incoming->recv(from, slot, from * block_bytes, block_bytes);
    }
    std::memcpy(out + r * block_bytes, in + r * block_bytes, block_bytes);
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (int s = 1; s < n; ++s) {
      if (!incoming->waitRecv(Remaining(deadline))) throw gloo::IoException("receive aborted");
    }
    for (int s = 1; s < n; ++s) {
      if (!outgoing->waitSend(Remaining(deadline))) throw gloo::IoException("send aborted");
    }
  });
}

absl::Status GlooCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  if (root < 0 || root >= world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank"));
  }
  if (world_size() == 1 || bytes == 0) return absl::OkStatus();
  return Guard("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<char*>(data), static_cast<size_t>(bytes));
    opts.setRoot(root);
    opts.setTag(static_cast<uint32_t>(context_->nextSlot()));
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommunicator::Barrier() {
  if (world_size() == 1) return absl::OkStatus();
  return Guard("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(static_cast<uint32_t>(context_->nextSlot()));
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectThroughDirectory(const std::string& dir,
                                                                      const GlooOptions& options) {
  gloo::rendezvous::FileStore files(dir);
  gloo::rendezvous::PrefixStore store("ranks", files);
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
      GlooCommunicator::Connect(store, options);
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<Communicator>(*std::move(comm));
}

}  // namespace sbp
