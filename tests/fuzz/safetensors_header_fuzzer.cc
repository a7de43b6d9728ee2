// libFuzzer target for the safetensors reader: the input is a whole file
// image. Opening must never crash, hang or leak, whatever the bytes; when it
// succeeds, every tensor must be readable within the image's bounds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/allocator.h"
#include "worker/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // The header parser alone, treating the input as header text.
  (void)sbp::ParseSafetensorsHeader(bytes, size, "fuzz").ok();

  auto file = sbp::SafetensorsFile::FromBytes(bytes, "fuzz");
  if (!file.ok()) return 0;
  sbp::CpuAllocator allocator;
  for (const sbp::SafetensorsTensorInfo& info : file->tensors()) {
    auto raw = file->RawBytes(info.name);
    if (!raw.ok() || raw->size() != info.end - info.begin) __builtin_trap();
    auto tensor = file->ReadAsF32(info.name, allocator);
    if (tensor.ok() && tensor->shape() != info.shape) __builtin_trap();
  }
  return 0;
}
