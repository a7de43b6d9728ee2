#include "worker/train/lora_merge.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/engine/lora_store.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"
#include "worker/train/peft_adapter.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

// The Hugging Face weight name an adapter key belongs to:
// base_model.model.<name>.lora_A.weight -> <name>.weight.
std::string BaseWeightName(const std::string& adapter_key) {
  std::string name = adapter_key.substr(std::string("base_model.model.").size());
  return name.substr(0, name.find(".lora_")) + ".weight";
}

// t^T of a host f32 matrix.
absl::StatusOr<Tensor> Transposed(const Tensor& t, Allocator& allocator) {
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(allocator, {t.dim(1), t.dim(0)}, DType::kF32));
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < t.dim(0); ++i) {
    for (int64_t j = 0; j < t.dim(1); ++j) dst[j * t.dim(0) + i] = src[i * t.dim(1) + j];
  }
  return out;
}

// Files of the base directory that are not its weights or config.
absl::Status CopyOtherFiles(const std::string& base_dir, const std::string& out_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || absl::EndsWith(name, ".safetensors") ||
        absl::EndsWith(name, ".safetensors.index.json") || absl::StartsWith(name, ".")) {
      continue;
    }
    fs::copy_file(entry.path(), fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("copying ", entry.path().string(), " to ", out_dir, ": ", ec.message()));
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("listing ", base_dir, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> MergeLoraAdapter(const std::string& base_dir,
                                                const std::string& adapter_dir,
                                                const std::string& out_dir) {
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  ASSIGN_OR_RETURN(ModelWeights model, LoadModelDirectory(base_dir, allocator));
  ASSIGN_OR_RETURN(const LoraOptions options, ReadPeftAdapterConfig(adapter_dir));
  ASSIGN_OR_RETURN(ParameterStore adapters,
                   CreateLoraStore(model.config, options, allocator, "adapter"));
  RETURN_IF_ERROR(LoadPeftAdapter(adapter_dir, adapters));
  const float scale = static_cast<float>(options.scaling());
  const auto named = adapters.NamedTensors();  // lora_A, lora_B of each layer, in turn
  for (size_t i = 0; i + 1 < named.size(); i += 2) {
    const auto& [a_name, a] = named[i];
    const Tensor& b = named[i + 1].second;
    const std::string target = BaseWeightName(a_name);
    Tensor* w = model.Find(target);
    if (w == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(base_dir, ": the adapter's ", a_name, " has no base weight ", target));
    }
    // W [out, in] += (s B) [out, r] (A^T)^T: MatmulXWt with x = s B and w = A^T [in, r].
    ASSIGN_OR_RETURN(Tensor scaled_b, Tensor::Empty(allocator, b.shape(), DType::kF32));
    backend.Copy(b, scaled_b);
    backend.Scale(scaled_b, scale);
    ASSIGN_OR_RETURN(const Tensor a_t, Transposed(a, allocator));
    backend.MatmulXWt(scaled_b, a_t, *w, /*accumulate=*/true);
  }
  const DType storage = CheckpointWeightDType(model.config);
  RETURN_IF_ERROR(SaveModelDirectory(out_dir, model, storage));
  RETURN_IF_ERROR(CopyOtherFiles(base_dir, out_dir));
  return nlohmann::json{{"base", base_dir},
                        {"adapter", adapter_dir},
                        {"out", out_dir},
                        {"r", options.r},
                        {"lora_alpha", options.alpha},
                        {"scaling", options.scaling()},
                        {"merged", named.size() / 2},
                        {"dtype", storage == DType::kBF16 ? "bfloat16" : "float32"}};
}

}  // namespace sbp
