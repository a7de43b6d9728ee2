#include "worker/engine/offload/checkpoint_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/failure_kind.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

class HostCheckpointStore final : public CheckpointStore {
 public:
  explicit HostCheckpointStore(Backend& backend)
      : CheckpointStore(backend.NewTransferQueue()), backend_(backend) {}
  ~HostCheckpointStore() override {
    (void)queue_->Drain();
    queue_.reset();  // no copy may run into a freed buffer
  }

  absl::Status Reserve(int count, const Tensor& like) override {
    RETURN_IF_ERROR(queue_->Drain());
    const bool fits = static_cast<int>(buffers_.size()) >= count && elements_ >= like.numel() &&
                      dtype_ == like.dtype();
    if (fits) return absl::OkStatus();
    buffers_.clear();  // release before growing
    elements_ = like.numel();
    dtype_ = like.dtype();
    for (int i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(Tensor buffer,
                       Tensor::Empty(backend_.host_allocator(), {elements_}, dtype_,
                                     absl::StrCat("host copy of layer ", i, " input")));
      buffers_.push_back(std::move(buffer));
    }
    return absl::OkStatus();
  }
  TransferQueue::Ticket Put(int index, const Tensor& slot) override {
    return queue_->Copy(slot, Stored(index, slot));
  }
  TransferQueue::Ticket Get(int index, const Tensor& slot) override {
    return queue_->Copy(Stored(index, slot), slot);
  }
  CheckpointTier tier() const override { return CheckpointTier::kHost; }
  int64_t host_bytes() const override {
    int64_t sum = 0;
    for (const Tensor& b : buffers_) sum += static_cast<int64_t>(b.nbytes());
    return sum;
  }
  int64_t disk_bytes() const override { return 0; }

 private:
  Tensor Stored(int index, const Tensor& slot) const {
    CHECK(index >= 0 && index < static_cast<int>(buffers_.size()) && slot.numel() <= elements_ &&
          slot.dtype() == dtype_)
        << "layer input " << index << " was not reserved for " << slot.DebugString();
    return buffers_[index].Rows(0, slot.numel());
  }

  Backend& backend_;
  std::vector<Tensor> buffers_;
  int64_t elements_ = 0;
  DType dtype_ = DType::kF32;
};

absl::Status StorageError(const std::string& dir, const std::string& what, int error) {
  return FileOperationError(
      absl::StrCat("streambp.offload.disk_dir ", dir, ": ", what, ": ", std::strerror(error)),
      error);
}

// An unnamed file in `dir`: O_TMPFILE, or a named one unlinked at once where
// the file system does not take O_TMPFILE.
absl::StatusOr<int> OpenAnonymousFile(const std::string& dir) {
#ifdef O_TMPFILE
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
    return StorageError(dir, "creating the offload file", errno);
  }
#endif
  std::string path = absl::StrCat(dir, "/.sbp-offload-XXXXXX");
  const int named = ::mkostemp(path.data(), O_CLOEXEC);
  if (named < 0) return StorageError(dir, "creating the offload file", errno);
  ::unlink(path.c_str());
  return named;
}

class DiskCheckpointStore final : public CheckpointStore {
 public:
  DiskCheckpointStore(Backend& backend, std::string dir, int fd, int64_t max_file_bytes)
      : CheckpointStore(backend.NewTransferQueue()),
        backend_(backend),
        dir_(std::move(dir)),
        fd_(fd),
        max_file_bytes_(max_file_bytes),
        host_addressable_(backend.device().is_cpu()) {}
  ~DiskCheckpointStore() override {
    (void)queue_->Drain();
    queue_.reset();  // no item may run on a closed descriptor
    ::close(fd_);
  }

  absl::Status Reserve(int count, const Tensor& like) override {
    RETURN_IF_ERROR(queue_->Drain());
    bytes_each_ = static_cast<int64_t>(like.nbytes());
    const int64_t needed = count * bytes_each_;
    if (needed > reserved_) {
      const std::string what = absl::StrCat("reserving ", needed, " bytes for ", count,
                                            " layer inputs of ", bytes_each_, " bytes");
      if (max_file_bytes_ > 0 && needed > max_file_bytes_) {
        return StorageError(dir_, absl::StrCat(what, " (the worker allows ", max_file_bytes_, ")"),
                            ENOSPC);
      }
      // posix_fallocate returns the error instead of setting errno.
      if (const int error = ::posix_fallocate(fd_, 0, needed); error != 0) {
        return StorageError(dir_, what, error);
      }
      reserved_ = needed;
    }
    if (!host_addressable_ && (!staging_[0].defined() || staging_[0].numel() < like.numel() ||
                               staging_dtype_ != like.dtype())) {
      for (Tensor& s : staging_) s = Tensor();
      staging_dtype_ = like.dtype();
      for (int k = 0; k < 2; ++k) {
        ASSIGN_OR_RETURN(staging_[k], Tensor::Empty(backend_.host_allocator(), {like.numel()},
                                                    like.dtype(), "disk tier staging"));
      }
    }
    return absl::OkStatus();
  }

  TransferQueue::Ticket Put(int index, const Tensor& slot) override {
    const int64_t offset = Offset(index, slot);
    if (host_addressable_) return queue_->Run([=, this] { return Write(slot, offset); });
    const Tensor staging = staging_[index % 2].Rows(0, slot.numel());
    queue_->Copy(slot, staging);
    return queue_->Run([=, this] { return Write(staging, offset); });
  }

  TransferQueue::Ticket Get(int index, const Tensor& slot) override {
    const int64_t offset = Offset(index, slot);
    if (host_addressable_) return queue_->Run([=, this] { return Read(slot, offset); });
    const Tensor staging = staging_[index % 2].Rows(0, slot.numel());
    queue_->Run([=, this] { return Read(staging, offset); });
    return queue_->Copy(staging, slot);
  }

  CheckpointTier tier() const override { return CheckpointTier::kDisk; }
  int64_t host_bytes() const override {
    int64_t sum = 0;
    for (const Tensor& s : staging_) sum += s.defined() ? static_cast<int64_t>(s.nbytes()) : 0;
    return sum;
  }
  int64_t disk_bytes() const override { return reserved_; }
  int64_t moved_bytes() const override {
    return host_addressable_ ? file_bytes_.load() : queue_->copied_bytes();
  }

 private:
  int64_t Offset(int index, const Tensor& slot) const {
    CHECK(static_cast<int64_t>(slot.nbytes()) == bytes_each_ &&
          (index + 1) * bytes_each_ <= reserved_)
        << "layer input " << index << " was not reserved for " << slot.DebugString();
    return index * bytes_each_;
  }
  absl::Status Write(const Tensor& from, int64_t offset) const {
    const char* p = static_cast<const char*>(from.raw_data());
    for (int64_t done = 0, n = static_cast<int64_t>(from.nbytes()); done < n;) {
      const ssize_t w = ::pwrite(fd_, p + done, n - done, offset + done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        return StorageError(dir_, absl::StrCat("writing ", n, " bytes at offset ", offset),
                            w < 0 ? errno : ENOSPC);
      }
      done += w;
    }
    file_bytes_ += static_cast<int64_t>(from.nbytes());
    return absl::OkStatus();
  }
  absl::Status Read(const Tensor& into, int64_t offset) const {
    char* p = static_cast<char*>(into.raw_data());
    for (int64_t done = 0, n = static_cast<int64_t>(into.nbytes()); done < n;) {
      const ssize_t r = ::pread(fd_, p + done, n - done, offset + done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        return StorageError(dir_, absl::StrCat("reading ", n, " bytes at offset ", offset),
                            r < 0 ? errno : EIO);
      }
      done += r;
    }
    file_bytes_ += static_cast<int64_t>(into.nbytes());
    return absl::OkStatus();
  }

  Backend& backend_;
  const std::string dir_;
  const int fd_;
  const int64_t max_file_bytes_;
  const bool host_addressable_;
  int64_t bytes_each_ = 0;
  int64_t reserved_ = 0;
  mutable std::atomic<int64_t> file_bytes_{0};  // written and read, on the queue's thread
  Tensor staging_[2];
  DType staging_dtype_ = DType::kF32;
};

}  // namespace

std::unique_ptr<CheckpointStore> NewHostCheckpointStore(Backend& backend) {
  return std::make_unique<HostCheckpointStore>(backend);
}

absl::Status CheckDiskDirectory(const std::string& dir) {
  struct stat st;
  if (dir.empty()) return absl::InvalidArgumentError("streambp.offload.disk_dir is empty");
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("streambp.offload.disk_dir ", dir,
                                                   ": cannot be used: ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("streambp.offload.disk_dir ", dir, ": is not a directory"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("streambp.offload.disk_dir ", dir,
                                                   ": is not writable: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointStore>> NewDiskCheckpointStore(Backend& backend,
                                                                        const std::string& dir,
                                                                        int64_t max_file_bytes) {
  RETURN_IF_ERROR(CheckDiskDirectory(dir));
  ASSIGN_OR_RETURN(const int fd, OpenAnonymousFile(dir));
  return std::unique_ptr<CheckpointStore>(
      new DiskCheckpointStore(backend, dir, fd, max_file_bytes));
}

}  // namespace sbp
