#include "worker/train/step_objective.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/batch.h"
#include "worker/train/objectives/dpo.h"
#include "worker/train/objectives/grpo.h"
#include "worker/train/packing.h"

namespace sbp {
namespace {

// Splits `items` into consecutive groups of at most `size`.
template <typename T>
std::vector<std::vector<T>> MicroBatches(const std::vector<T>& items, int64_t size) {
  std::vector<std::vector<T>> out;
  const size_t step = static_cast<size_t>(std::max<int64_t>(size, 1));
  for (size_t i = 0; i < items.size(); i += step) {
    out.emplace_back(items.begin() + i, items.begin() + std::min(items.size(), i + step));
  }
  return out;
}

// Sums `values` over the ranks (counts are exact in double up to 2^53).
absl::Status SumOverRanks(Communicator* comm, std::vector<double>& values, ReduceOp op) {
  if (comm == nullptr || comm->world_size() == 1) return absl::OkStatus();
  return comm->AllReduce(values.data(), static_cast<int64_t>(values.size()), op);
}

absl::StatusOr<int64_t> GlobalCount(Communicator* comm, int64_t local) {
  std::vector<double> v = {static_cast<double>(local)};
  RETURN_IF_ERROR(SumOverRanks(comm, v, ReduceOp::kSum));
  return static_cast<int64_t>(v[0]);
}

// What every objective's step works with.
struct StepContext {
  const JobSpec& spec;
  const Dataset& dataset;
  Engine& engine;
  const ModelTensors& weights;
  Engine& reference_engine;
  const ModelTensors* reference;  // null when the objective has none
  Communicator* comm;             // null on a single worker
};

class SftStep final : public StepObjective {
 public:
  explicit SftStep(const StepContext& c) : c_(c) {}

  absl::StatusOr<ObjectiveStepResult> Run(const std::vector<int64_t>& indices,
                                          ModelTensors& grads) override {
    std::vector<TokenSequence> step;
    for (int64_t i : indices) step.push_back(c_.dataset.SftAt(i));
    // Packing keeps the valid targets (worker/train/packing.h); micro-batches
    // then count packed sequences.
    if (c_.spec.data_packing) step = PackSequences(step, c_.spec.seq_len);
    const int64_t local_targets = CountValidTargets(step);
    ASSIGN_OR_RETURN(const int64_t normaliser, GlobalCount(c_.comm, local_targets));
    ObjectiveStepResult result;
    if (normaliser == 0) return result;
    for (const auto& micro : MicroBatches(step, c_.spec.train.micro_batch_sequences)) {
      ASSIGN_OR_RETURN(BatchResult r,
                       SftForwardBackward(c_.engine, c_.weights, micro, grads, normaliser));
      result.loss += r.loss;
      result.tokens += r.tokens;
      for (const TokenSequence& s : micro) {
        result.model_flops += PackedTrainingFlops(c_.engine.config(), s);
      }
    }
    result.extra["valid_targets"] = local_targets;
    return result;
  }

 private:
  StepContext c_;
};

double SequenceFlops(const ModelConfig& config, const TokenSequence& s) {
  return TrainingFlops(config, static_cast<int64_t>(s.input_ids.size()));
}

// DPO: reference log-probs come from a real forward of the frozen reference
// model, once per example (cached); the pair count N is the whole step's.
class DpoStep final : public StepObjective {
 public:
  explicit DpoStep(const StepContext& c) : c_(c) {}

  absl::StatusOr<ObjectiveStepResult> Run(const std::vector<int64_t>& indices,
                                          ModelTensors& grads) override {
    ObjectiveStepResult result;
    ASSIGN_OR_RETURN(const int64_t global_pairs,
                     GlobalCount(c_.comm, static_cast<int64_t>(indices.size())));
    double accuracy = 0, margin = 0, chosen = 0, rejected = 0;
    for (const auto& micro : MicroBatches(indices, c_.spec.train.micro_batch_sequences)) {
      std::vector<DpoPair> pairs;
      std::vector<ReferenceLogProbs> refs;
      for (int64_t i : micro) {
        pairs.push_back(c_.dataset.DpoAt(i));
        auto cached = cache_.find(i);
        if (cached == cache_.end()) {
          ASSIGN_OR_RETURN(
              ReferenceLogProbs ref,
              ComputeReferenceLogProbs(c_.reference_engine, *c_.reference, pairs.back()));
          cached = cache_.emplace(i, ref).first;
        }
        refs.push_back(cached->second);
      }
      ASSIGN_OR_RETURN(DpoResult r, DpoForwardBackward(c_.engine, c_.weights, pairs, refs,
                                                       c_.spec.dpo.beta, global_pairs, grads));
      result.loss += r.loss;
      result.tokens += r.tokens;
      const double n = static_cast<double>(pairs.size());
      accuracy += r.reward_accuracy() * n;
      margin += r.mean_margin() * n;
      chosen += r.mean_chosen_reward() * n;
      rejected += r.mean_rejected_reward() * n;
      for (const DpoPair& p : pairs) {
        result.model_flops += SequenceFlops(c_.engine.config(), p.chosen) +
                              SequenceFlops(c_.engine.config(), p.rejected);
      }
    }
    const double n = std::max<double>(1.0, static_cast<double>(global_pairs));
    result.extra = {{"reward_accuracy", accuracy / n},
                    {"reward_margin", margin / n},
                    {"chosen_reward", chosen / n},
                    {"rejected_reward", rejected / n}};
    return result;
  }

 private:
  StepContext c_;
  absl::flat_hash_map<int64_t, ReferenceLogProbs> cache_;
};

// GRPO: the groups come with the data (offline) or are sampled from the
// current weights at the start of the step (online, `rollouts`). The
// step's normaliser counts are summed over all micro-batches before the
// first one runs; offline reference log-probs are cached (online
// completions are new every step).
class GrpoStep final : public StepObjective {
 public:
  GrpoStep(const StepContext& c, RolloutSampler* rollouts)
      : c_(c), options_(GrpoOptionsFromSpec(c.spec.grpo)), rollouts_(rollouts) {}

  absl::StatusOr<ObjectiveStepResult> Run(const std::vector<int64_t>& indices,
                                          ModelTensors& grads) override {
    std::vector<GrpoGroup> all;
    ObjectiveStepResult result;
    if (rollouts_ != nullptr) {
      ASSIGN_OR_RETURN(RolloutBatch batch,
                       rollouts_->Sample(c_.dataset, c_.weights, indices, step_));
      all = std::move(batch.groups);
      result.rollout = batch.stats;
    } else {
      for (int64_t i : indices) all.push_back(c_.dataset.GrpoAt(i));
    }
    const GrpoCounts local = CountGrpo(all);
    std::vector<double> sums = {static_cast<double>(local.sequences),
                                static_cast<double>(local.completion_tokens)};
    std::vector<double> longest = {static_cast<double>(local.max_completion_length)};
    RETURN_IF_ERROR(SumOverRanks(c_.comm, sums, ReduceOp::kSum));
    RETURN_IF_ERROR(SumOverRanks(c_.comm, longest, ReduceOp::kMax));
    GrpoCounts global;
    global.sequences = static_cast<int64_t>(sums[0]);
    global.completion_tokens = static_cast<int64_t>(sums[1]);
    global.max_completion_length = static_cast<int64_t>(longest[0]);
    double kl = 0, reward = 0;
    int64_t clipped = 0;
    std::vector<size_t> positions(indices.size());
    for (size_t k = 0; k < positions.size(); ++k) positions[k] = k;
    for (const auto& micro : MicroBatches(positions, c_.spec.train.micro_batch_sequences)) {
      std::vector<GrpoGroup> groups;
      GrpoReferenceLogProbs refs;
      for (size_t k : micro) {
        groups.push_back(std::move(all[k]));
        if (c_.reference == nullptr) continue;
        if (rollouts_ != nullptr) {
          ASSIGN_OR_RETURN(
              GrpoReferenceLogProbs ref,
              ComputeGrpoReferenceLogProbs(c_.reference_engine, *c_.reference, {groups.back()}));
          refs.logprobs.push_back(std::move(ref.logprobs.front()));
          continue;
        }
        const int64_t i = indices[k];
        auto cached = cache_.find(i);
        if (cached == cache_.end()) {
          ASSIGN_OR_RETURN(
              GrpoReferenceLogProbs ref,
              ComputeGrpoReferenceLogProbs(c_.reference_engine, *c_.reference, {groups.back()}));
          cached = cache_.emplace(i, std::move(ref.logprobs.front())).first;
        }
        refs.logprobs.push_back(cached->second);
      }
      ASSIGN_OR_RETURN(GrpoResult r, GrpoForwardBackward(c_.engine, c_.weights, groups,
                                                         c_.reference ? &refs : nullptr, options_,
                                                         global, grads));
      result.loss += r.loss;
      result.tokens += r.tokens;
      kl += r.kl_sum;
      reward += r.reward_sum;
      clipped += r.clipped_tokens;
      for (const GrpoGroup& g : groups) {
        for (size_t c = 0; c < g.completions.size(); ++c) {
          result.model_flops += SequenceFlops(c_.engine.config(), GrpoSequence(g, c));
        }
      }
    }
    const double tokens = std::max<double>(1.0, static_cast<double>(global.completion_tokens));
    result.extra = nlohmann::json{
        {"kl", kl / tokens},
        {"clip_fraction", static_cast<double>(clipped) / tokens},
        {"reward", reward / std::max<double>(1.0, static_cast<double>(global.sequences))}};
    return result;
  }

 private:
  StepContext c_;
  GrpoOptions options_;
  RolloutSampler* rollouts_;
  absl::flat_hash_map<int64_t, std::vector<std::vector<float>>> cache_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StepObjective>> MakeStepObjective(
    const JobSpec& spec, const Dataset& dataset, Engine& engine, const ModelTensors& weights,
    Engine& reference_engine, const ModelTensors* reference, Communicator* comm,
    RolloutSampler* rollouts) {
  const StepContext context{spec, dataset, engine, weights, reference_engine, reference, comm};
  switch (spec.objective) {
    case Objective::kSft:
      return std::unique_ptr<StepObjective>(new SftStep(context));
    case Objective::kDpo:
      if (reference == nullptr) {
        return absl::InvalidArgumentError("dpo.reference: DPO needs a reference model");
      }
      return std::unique_ptr<StepObjective>(new DpoStep(context));
    case Objective::kGrpo:
      if (spec.grpo.beta > 0 && reference == nullptr) {
        return absl::InvalidArgumentError("grpo.reference: grpo.beta > 0 needs a reference model");
      }
      if (spec.grpo.online() != (rollouts != nullptr)) {
        return absl::FailedPreconditionError(
            spec.grpo.online() ? "grpo.rollout: online GRPO needs a rollout sampler"
                               : "a rollout sampler was given to an offline GRPO job");
      }
      return std::unique_ptr<StepObjective>(new GrpoStep(context, rollouts));
  }
  return absl::InvalidArgumentError("unknown objective");
}

}  // namespace sbp
