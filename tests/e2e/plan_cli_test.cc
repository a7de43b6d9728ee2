// `sbp plan` as a user runs it: the breakdown of one configuration and the
// longest sequence per mode, as text and as JSON, and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

CommandResult Plan(const std::string& args) {
  return RunCommand(SbpBinary() + " plan " + args, FreshDir("sbp_plan"));
}

nlohmann::json ParseJson(const CommandResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

TEST(PlanCli, OneConfigurationAsJsonHasThePeakAndItsBreakdown) {
  const CommandResult r = Plan(
      "--preset bench-qwen3 --seq-len 4096 --mode stream --chunk-tokens 256 "
      "--logits-chunk-tokens 512 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = ParseJson(r);
  ASSERT_TRUE(j.contains("peak_bytes"));
  ASSERT_TRUE(j["breakdown"].is_object());
  int64_t sum = 0;
  for (const auto& [name, bytes] : j["breakdown"].items()) sum += bytes.get<int64_t>();
  EXPECT_EQ(sum, j["peak_bytes"].get<int64_t>());
  for (const char* term :
       {"weights", "gradients", "optimizer_moments", "layer_inputs", "kv_buffers",
        "chunk_activations", "hidden_gradient", "logits", "embedding_row_gradient"}) {
    EXPECT_GT(j["breakdown"].value(term, int64_t{0}), 0) << term;
  }
  EXPECT_EQ(j["chunk_tokens"], 256);
  EXPECT_EQ(j["logits_chunk_tokens"], 512);
  EXPECT_EQ(j["breakdown"].value("logits", int64_t{0}), int64_t{512} * 151936 * 4);
  // On one CPU worker the embedding's gradient is the rows of the step's
  // tokens: one sequence by default, --sequences-per-step more.
  EXPECT_EQ(j["breakdown"].value("embedding_row_gradient", int64_t{0}), int64_t{4096} * 512 * 4);
  const nlohmann::json eight =
      ParseJson(Plan("--preset bench-qwen3 --seq-len 4096 --chunk-tokens 256 "
                     "--logits-chunk-tokens 512 --sequences-per-step 8 -o json"));
  EXPECT_EQ(eight["breakdown"].value("embedding_row_gradient", int64_t{0}),
            int64_t{8} * 4096 * 512 * 4);

  // --bp-only drops the optimizer moments.
  const nlohmann::json bp = ParseJson(
      Plan("--preset bench-qwen3 --seq-len 4096 --chunk-tokens 256 --logits-chunk-tokens 512 "
           "--bp-only -o json"));
  EXPECT_FALSE(bp["breakdown"].contains("optimizer_moments"));
  EXPECT_EQ(j["peak_bytes"].get<int64_t>() - bp["peak_bytes"].get<int64_t>(),
            j["breakdown"].value("optimizer_moments", int64_t{0}));
}

// The row set's room replaces the dense table for the whole step: no
// dense embedding gradient at the peak, even for short sequences.
TEST(PlanCli, ShortSequencesHoldNoDenseEmbeddingGradient) {
  const nlohmann::json j =
      ParseJson(Plan("--preset bench-qwen3 --seq-len 512 --logits-chunk-tokens 64 -o json"));
  EXPECT_NE(j["peak_phase"], "optimizer_update") << j.dump();
  EXPECT_FALSE(j["breakdown"].contains("embedding_gradient")) << j.dump();
  EXPECT_EQ(j["breakdown"].value("embedding_row_gradient", int64_t{0}), int64_t{512} * 512 * 4);
}

TEST(PlanCli, MaxSeqLenAsJsonOrdersTheModes) {
  const CommandResult r =
      Plan("--preset qwen3-8b --max-seq-len --memory 80GiB --precision bf16 --bp-only -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = ParseJson(r);
  ASSERT_EQ(j.size(), 3u) << r.out;
  const int64_t full = j["full"], checkpoint = j["checkpoint"], stream = j["stream"];
  EXPECT_GT(full, 1000);
  EXPECT_GT(checkpoint, 2 * full);
  EXPECT_GT(stream, 2 * checkpoint);
}

TEST(PlanCli, MemoryChoosesAutoChunksAndReportsAMiss) {
  const nlohmann::json fits =
      ParseJson(Plan("--preset bench-qwen3 --seq-len 8192 --memory 4GiB -o json"));
  EXPECT_EQ(fits["fits"], true);
  EXPECT_LE(fits["peak_bytes"].get<int64_t>(), fits["usable_bytes"].get<int64_t>());
  EXPECT_GE(fits["chunk_tokens"].get<int64_t>(), 64);

  const CommandResult miss = Plan("--preset bench-qwen3 --seq-len 8192 --memory 1GiB -o json");
  EXPECT_EQ(miss.exit_code, 1);
  EXPECT_EQ(ParseJson(miss)["fits"], false);
  EXPECT_NE(miss.err.find("does not fit: stream mode at seq_len 8192 needs"), std::string::npos)
      << miss.err;
}

TEST(PlanCli, TextOutputNamesTheTerms) {
  const CommandResult r =
      Plan("--preset qwen3-8b --seq-len 8192 --mode checkpoint --precision bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"qwen3-8b, checkpoint mode, seq_len 8192", "peak ", "master_weights",
                           "logits_gradient", "cuda_context"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
}

TEST(PlanCli, HostMemoryReportsTheLongestSequencePerTier) {
  const CommandResult r = Plan(
      "--preset qwen3-8b --max-seq-len --memory 80GiB --precision bf16 --host-memory 1.8TiB "
      "--mode stream -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = ParseJson(r);
  ASSERT_TRUE(j["stream"].is_object()) << r.out;
  ASSERT_EQ(j["stream"].size(), 2u) << r.out;  // device and host (no --disk)
  const int64_t device = j["stream"]["device"], host = j["stream"]["host"];
  EXPECT_GT(device, 100'000);
  EXPECT_GE(host, 1'000'000);  // the long-context target on one 80 GiB GPU

  const CommandResult text = Plan(
      "--preset qwen3-8b --max-seq-len --memory 80GiB --precision bf16 --host-memory 1.8TiB "
      "--disk 8TB --mode stream");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* part : {"host memory 1.8 TiB, disk 7.3 TiB, optimizer offload on", "  device ",
                           "  host ", "  disk "}) {
    EXPECT_NE(text.out.find(part), std::string::npos) << part << "\n" << text.out;
  }
}

TEST(PlanCli, OneLengthWithTiersHasHostDiskAndCopies) {
  CommandResult r = Plan(
      "--preset qwen3-8b --seq-len 1000000 --memory 80GiB --precision bf16 --host-memory 1.8TiB "
      "-o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r);
  EXPECT_EQ(j["checkpoint_tier"], "host");
  EXPECT_EQ(j["optimizer_offload"], true);
  EXPECT_EQ(j["fits"], true);
  EXPECT_EQ(j["breakdown"].value("layer_input_slots", int64_t{0}), int64_t{2} * 1000000 * 4096 * 2);
  EXPECT_FALSE(j["breakdown"].contains("optimizer_moments"));
  EXPECT_EQ(j["host_breakdown"]["host_layer_inputs"], int64_t{35} * 1000000 * 4096 * 2);
  EXPECT_GT(j["host_breakdown"].value("host_optimizer_moments", int64_t{0}), 0);
  EXPECT_EQ(j["copy_bytes_per_pass"], int64_t{2} * 35 * 1000000 * 4096 * 2);
  EXPECT_GT(j["copy_seconds_per_pass"].get<double>(), 0);
  EXPECT_EQ(j["disk_bytes"], 0);

  // Too little host memory and a disk: the disk tier, as text.
  r = Plan(
      "--preset qwen3-8b --seq-len 1000000 --memory 80GiB --precision bf16 --host-memory 200GiB "
      "--disk 4TB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"checkpoints: disk tier (auto", "disk_staging", "disk 267.0 GiB",
                           "copies: checkpoints 534.1 GiB per sequence", "at 5 GB/s",
                           "copies: optimizer", "host memory 200.0 GiB (180.0 GiB usable)"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }

  // Nothing fits: exit 1 naming the short resource.
  r = Plan(
      "--preset qwen3-8b --seq-len 1000000 --memory 80GiB --precision bf16 --host-memory 100GiB");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("host memory is short"), std::string::npos) << r.err;

  // The device tier asked for explicitly, the optimizer kept: as before.
  r = Plan(
      "--preset qwen3-8b --seq-len 8192 --precision bf16 --checkpoints device "
      "--optimizer-offload off -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = ParseJson(r);
  EXPECT_EQ(j["host_bytes"], 0);
  EXPECT_GT(j["breakdown"].value("layer_inputs", int64_t{0}), 0);
}

TEST(PlanCli, SequenceParallelPlansOneRankOfTheGroup) {
  // One length: a rank of 8 holds 1/8 of the tokens; --world-size defaults to P.
  CommandResult r =
      Plan("--preset qwen3-8b --seq-len 1048576 --precision bf16 --sequence-parallel 8 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r);
  EXPECT_EQ(j["sequence_parallel"], 8);
  EXPECT_EQ(j["world_size"], 8);
  EXPECT_EQ(j["seq_len"], 1048576);
  EXPECT_EQ(j["local_tokens"], 131072);
  EXPECT_GT(j["all_to_all_bytes_per_pass"].get<int64_t>(), 0);
  // One KV head of 128 per rank (qwen3-8b has 8), bf16, over the whole sequence.
  EXPECT_EQ(j["breakdown"]["sequence_parallel_kv"], int64_t{2} * 1048576 * 128 * 2);
  r = Plan(
      "--preset qwen3-8b --seq-len 1048576 --precision bf16 --sequence-parallel 8 "
      "--world-size 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"16 workers (ZeRO-2)", "sequence parallel 8: 131072 tokens per rank",
                           "4 query / 1 KV heads", "all-to-all "}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }

  // The longest sequence is the whole one, and the line says what bounds it.
  r = Plan(
      "--preset llama3.1-8b --max-seq-len --memory 80GiB --precision bf16 --mode stream "
      "--sequence-parallel 8 --host-memory 256GiB --disk 3.84TB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part :
       {"8 workers (ZeRO-2), each sequence split over 8 ranks",
        "bounded by host memory: host_layer_inputs", "bounded by device memory: "}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  const nlohmann::json longest = ParseJson(
      Plan("--preset llama3.1-8b --max-seq-len --memory 80GiB --precision bf16 --mode stream "
           "--sequence-parallel 8 --host-memory 256GiB --disk 3.84TB -o json"));
  EXPECT_GE(longest["stream"]["disk"].get<int64_t>(), 8'000'000) << longest;
  EXPECT_EQ(longest["stream"]["disk"].get<int64_t>() % 8, 0) << longest;

  // P must divide the world and the heads.
  r = Plan("--preset qwen3-8b --seq-len 4096 --sequence-parallel 4 --world-size 6");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--sequence-parallel: must divide --world-size (6) (got 4)"),
            std::string::npos)
      << r.err;
  r = Plan("--preset qwen3-14b --seq-len 4096 --sequence-parallel 20");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--sequence-parallel: 20 ranks cannot share the model's attention heads"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("40 query heads"), std::string::npos) << r.err;
}

TEST(PlanCli, BadInputIsExitCodeTwoWithTheFlag) {
  CommandResult r = Plan("--preset qwen3-8b --max-seq-len");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--max-seq-len needs --memory"), std::string::npos) << r.err;
  r = Plan("--preset qwen3-8b --seq-len 100 --chunk-tokens lots");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--chunk-tokens"), std::string::npos) << r.err;
  r = Plan("--preset nope --seq-len 100");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown model preset 'nope'"), std::string::npos) << r.err;
  r = Plan("--preset qwen3-8b --seq-len 100 --precision bf16 --device cpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("precision"), std::string::npos) << r.err;
  r = Plan("--seq-len 100");
  EXPECT_EQ(r.exit_code, 2);
  r = Plan("--preset qwen3-8b --seq-len 100 --host-memory lots");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--host-memory"), std::string::npos) << r.err;
  r = Plan("--preset qwen3-8b --seq-len 100 --checkpoints nvme");
  EXPECT_EQ(r.exit_code, 2);
  r = Plan("--preset qwen3-8b --seq-len 100 --link-bandwidth fast");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--link-bandwidth"), std::string::npos) << r.err;
}

// `sbp plan JOB.yaml` plans what the spec asks for, as admission does: the
// same figures as the flags that describe the same job, --set included.
TEST(PlanCli, AJobSpecPlansAsItsFlagsDo) {
  const std::filesystem::path dir = FreshDir("sbp_plan_job");
  WriteFile(dir / "job.yaml",
            "name: long\nmodel: bench-qwen3\ndata: data.jsonl\nobjective: sft\nseq_len: 4096\n"
            "streambp: {mode: stream, chunk_tokens: 256, logits_chunk_tokens: 128}\n"
            "train: {steps: 1, lr: 1.0e-4}\n");
  auto plan = [&](const std::string& args) {
    return RunCommand(SbpBinary() + " plan " + args, dir);
  };
  const CommandResult job = plan("job.yaml -o json");
  ASSERT_EQ(job.exit_code, 0) << job.err;
  // The spec's train.sequences_per_step is 8 by default.
  const CommandResult flags = plan(
      "--preset bench-qwen3 --seq-len 4096 --mode stream --chunk-tokens 256 "
      "--logits-chunk-tokens 128 --sequences-per-step 8 -o json");
  ASSERT_EQ(flags.exit_code, 0) << flags.err;
  EXPECT_EQ(ParseJson(job)["peak_bytes"], ParseJson(flags)["peak_bytes"]);

  const CommandResult longer = plan("job.yaml --set seq_len=8192 --set streambp.mode=full -o json");
  ASSERT_EQ(longer.exit_code, 0) << longer.err;
  const CommandResult longer_flags = plan(
      "--preset bench-qwen3 --seq-len 8192 --mode full --chunk-tokens 256 "
      "--logits-chunk-tokens 128 --sequences-per-step 8 -o json");
  EXPECT_EQ(ParseJson(longer)["peak_bytes"], ParseJson(longer_flags)["peak_bytes"]);
  EXPECT_EQ(ParseJson(longer)["mode"], "full");

  const CommandResult longest = plan("job.yaml --max-seq-len --memory 80GiB -o json");
  ASSERT_EQ(longest.exit_code, 0) << longest.err;
  EXPECT_GT(ParseJson(longest).value("stream", int64_t{0}), 4096) << longest.out;

  const CommandResult bad = plan("job.yaml --set train.lr=-1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("job.yaml with --set: train.lr: must be a positive number"),
            std::string::npos)
      << bad.err;
  const CommandResult mixed = plan("job.yaml --seq-len 8192");
  EXPECT_EQ(mixed.exit_code, 2);
  EXPECT_NE(mixed.err.find("--seq-len comes from the job spec job.yaml: change it with --set"),
            std::string::npos)
      << mixed.err;
  const CommandResult no_job = plan("--preset bench-qwen3 --seq-len 4096 --set seq_len=1");
  EXPECT_EQ(no_job.exit_code, 2);
  EXPECT_NE(no_job.err.find("--set needs a job spec"), std::string::npos) << no_job.err;
}

}  // namespace
}  // namespace sbp::testing
