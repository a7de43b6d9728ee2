#include "worker/engine/decode/generation.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/allocator.h"
#include "worker/engine/engine_buffers.h"

namespace sbp {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool EndsWith(const std::vector<int32_t>& ids, const std::vector<int32_t>& suffix) {
  return !suffix.empty() && ids.size() >= suffix.size() &&
         std::equal(suffix.begin(), suffix.end(),
                    ids.end() - static_cast<ptrdiff_t>(suffix.size()));
}

// Row logits as host floats: the tensor itself on the CPU, else a copy.
class HostLogits {
 public:
  absl::StatusOr<const float*> Read(Backend& backend, const Tensor& logits) {
    if (backend.device().is_cpu()) return logits.data<float>();
    if (!host_.defined() || host_.shape() != logits.shape()) {
      ASSIGN_OR_RETURN(host_, Tensor::Empty(allocator_, logits.shape(), DType::kF32,
                                            "decode logits on the host"));
    }
    backend.Copy(logits, host_);
    return host_.data<float>();
  }

 private:
  CpuAllocator allocator_;
  Tensor host_;
};

absl::StatusOr<Tensor> MakeDecodeLogits(Backend& backend, int64_t rows, int64_t vocab) {
  return engine_internal::MakeF32(backend, {rows, vocab}, "decode logits");
}

// One request's progress.
struct Live {
  size_t request = 0;
  KvCache cache;
  bool done = false;
};

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "length";
}

std::vector<int32_t> Generation::content() const {
  size_t cut = 0;
  if (finish == FinishReason::kEos && !ids.empty()) cut = 1;
  if (finish == FinishReason::kStop) cut = stop_length;
  return std::vector<int32_t>(ids.begin(), ids.end() - static_cast<ptrdiff_t>(cut));
}

absl::Status CheckGenerationOptions(const GenerationOptions& options, int64_t vocab_size) {
  if (options.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1, got ", options.max_new_tokens));
  }
  if (options.max_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the decode batch must be >= 0 (0: all), got ", options.max_batch));
  }
  RETURN_IF_ERROR(CheckSamplingOptions(options.sampling));
  for (int32_t id : options.eos_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("eos token id ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  for (size_t s = 0; s < options.stop_sequences.size(); ++s) {
    const std::vector<int32_t>& stop = options.stop_sequences[s];
    if (stop.empty())
      return absl::InvalidArgumentError(absl::StrCat("stop sequence ", s, " is empty"));
    for (int32_t id : stop) {
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("stop sequence ", s, ": token id ", id,
                                                       " is outside the vocabulary [0, ",
                                                       vocab_size, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Generation>> Generate(Decoder& decoder, const ModelTensors& weights,
                                                 std::vector<GenerationRequest> requests,
                                                 const GenerationOptions& options,
                                                 GenerationStats* stats) {
  const ModelConfig& config = decoder.config();
  Backend& backend = decoder.backend();
  const int64_t vocab = config.vocab_size;
  RETURN_IF_ERROR(CheckGenerationOptions(options, vocab));
  for (size_t r = 0; r < requests.size(); ++r) {
    if (requests[r].prompt.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("request ", r, ": the prompt is empty"));
    }
  }
  GenerationStats local_stats;
  GenerationStats& st = stats != nullptr ? *stats : local_stats;
  std::vector<Generation> out(requests.size());
  // A step's rows are sampled in parallel, each thread with its own scratch;
  // a row's token depends only on its logits and its own stream.
  std::vector<TokenSampler> row_samplers(static_cast<size_t>(std::max(1, omp_get_max_threads())),
                                         TokenSampler(options.sampling));
  HostLogits host;
  const int64_t wave =
      options.max_batch > 0 ? options.max_batch : std::max<int64_t>(1, requests.size());

  // Appends a sampled token; true when the sequence is finished.
  auto append = [&](size_t r, const SampledToken& token) {
    Generation& g = out[r];
    g.ids.push_back(token.id);
    g.logprobs.push_back(token.logprob);
    if (std::find(options.eos_token_ids.begin(), options.eos_token_ids.end(), token.id) !=
        options.eos_token_ids.end()) {
      g.finish = FinishReason::kEos;
      return true;
    }
    for (const std::vector<int32_t>& stop : options.stop_sequences) {
      if (EndsWith(g.ids, stop)) {
        g.finish = FinishReason::kStop;
        g.stop_length = stop.size();
        return true;
      }
    }
    g.finish = FinishReason::kLength;
    return static_cast<int64_t>(g.ids.size()) >= options.max_new_tokens;
  };

  for (size_t first = 0; first < requests.size(); first += static_cast<size_t>(wave)) {
    const size_t last = std::min(requests.size(), first + static_cast<size_t>(wave));
    // Every cache of the wave first, so that a wave that does not fit fails
    // before any compute. The last new token never enters its cache.
    std::vector<Live> live;
    int64_t cache_bytes = 0;
    for (size_t r = first; r < last; ++r) {
      const int64_t capacity =
          static_cast<int64_t>(requests[r].prompt.size()) + options.max_new_tokens - 1;
      Live l;
      l.request = r;
      ASSIGN_OR_RETURN(l.cache, KvCache::Allocate(backend, config, capacity));
      cache_bytes += KvCache::Bytes(config, capacity, DTypeSize(backend.activation_dtype()));
      live.push_back(std::move(l));
    }
    st.kv_cache_bytes = std::max(st.kv_cache_bytes, cache_bytes);

    const auto prefill_start = Clock::now();
    {
      ASSIGN_OR_RETURN(Tensor logits, MakeDecodeLogits(backend, 1, vocab));
      for (Live& l : live) {
        GenerationRequest& request = requests[l.request];
        RETURN_IF_ERROR(decoder.Prefill(weights, request.prompt, l.cache, logits));
        ASSIGN_OR_RETURN(const float* row, host.Read(backend, logits));
        l.done = append(l.request, row_samplers.front().Sample(row, vocab, request.stream));
        st.prompt_tokens += static_cast<int64_t>(request.prompt.size());
        st.new_tokens += 1;
      }
    }
    st.prefill_seconds += SecondsSince(prefill_start);

    const auto decode_start = Clock::now();
    // One logits buffer for the wave's steps (its first rows serve a step with
    // fewer live sequences): a fresh [rows, vocab] tensor each step would be
    // pages faulted in again every step.
    ASSIGN_OR_RETURN(Tensor wave_logits,
                     MakeDecodeLogits(backend, static_cast<int64_t>(live.size()), vocab));
    while (true) {
      std::vector<int32_t> tokens;
      std::vector<KvCache*> caches;
      std::vector<size_t> rows;
      for (size_t i = 0; i < live.size(); ++i) {
        if (live[i].done) continue;
        tokens.push_back(out[live[i].request].ids.back());
        caches.push_back(&live[i].cache);
        rows.push_back(i);
      }
      if (tokens.empty()) break;
      const int64_t b = static_cast<int64_t>(tokens.size());
      Tensor logits = wave_logits.Rows(0, b);
      RETURN_IF_ERROR(decoder.Step(weights, tokens, caches, logits));
      ASSIGN_OR_RETURN(const float* data, host.Read(backend, logits));
      std::vector<SampledToken> sampled(static_cast<size_t>(b));
#pragma omp parallel for schedule(static, 1) if (b > 1)
      for (int64_t k = 0; k < b; ++k) {
        const Live& l = live[rows[static_cast<size_t>(k)]];
        sampled[static_cast<size_t>(k)] =
            row_samplers[static_cast<size_t>(omp_get_thread_num()) % row_samplers.size()].Sample(
                data + k * vocab, vocab, requests[l.request].stream);
      }
      for (int64_t k = 0; k < b; ++k) {
        Live& l = live[rows[static_cast<size_t>(k)]];
        l.done = append(l.request, sampled[static_cast<size_t>(k)]);
        st.new_tokens += 1;
      }
    }
    st.decode_seconds += SecondsSince(decode_start);
  }
  return out;
}

}  // namespace sbp
