#include "worker/model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/random.h"
#include "nlohmann/json.hpp"
#include "tests/worker/model/test_util.h"

namespace sbp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor RandomTensor(CpuAllocator& alloc, Shape shape, uint64_t seed) {
  Tensor t = *Tensor::Empty(alloc, std::move(shape), DType::kF32);
  FillNormal(t, seed, 0.0f, 1.0f);
  return t;
}

std::vector<float> Values(const Tensor& t) {
  const float* data = t.data<float>();
  return std::vector<float>(data, data + t.numel());
}

// Error message of opening `image` from memory; the open must fail with
// InvalidArgument.
std::string OpenError(const std::string& image) {
  auto file = SafetensorsFile::FromBytes(image, "bad.safetensors");
  EXPECT_FALSE(file.ok());
  if (file.ok()) return "";
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("bad.safetensors: "));
  return std::string(file.status().message());
}

std::string HeaderError(absl::string_view header, size_t data_bytes) {
  return OpenError(testing::SafetensorsImage(header, std::string(data_bytes, '\0')));
}

TEST(Safetensors, F32RoundTripWithMetadata) {
  const std::string dir = testing::MakeTempDir("st");
  CpuAllocator alloc;
  NamedTensors tensors = {{"b.weight", RandomTensor(alloc, {3, 5}, 1)},
                          {"a.bias", RandomTensor(alloc, {7}, 2)},
                          {"scalar", RandomTensor(alloc, {}, 3)},
                          {"empty", *Tensor::Empty(alloc, {0, 4}, DType::kF32)}};
  const std::string path = dir + "/x.safetensors";
  ASSERT_TRUE(
      WriteSafetensors(path, tensors, {{"format", "pt"}, {"note", "hi"}}, DType::kF32).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const std::string bytes = testing::ReadFile(path);
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);  // data section 8-byte aligned
  EXPECT_EQ(bytes.size(), 8 + header_size + (15 + 7 + 1) * 4);
  EXPECT_EQ(bytes[8], '{');

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  // Data order is the given order (the empty tensor sits at the end offset).
  EXPECT_THAT(file->names(), ElementsAre("b.weight", "a.bias", "scalar", "empty"));
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("note"), "hi");
  EXPECT_EQ(*file->dtype("a.bias"), SafetensorsDType::kF32);
  EXPECT_EQ(*file->shape("b.weight"), (Shape{3, 5}));
  EXPECT_EQ(*file->shape("scalar"), Shape{});
  EXPECT_EQ(file->RawBytes("a.bias")->size(), 28u);
  for (const auto& [name, tensor] : tensors) {
    auto read = file->ReadAsF32(name, alloc);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->shape(), tensor.shape());
    EXPECT_EQ(Values(*read), Values(tensor)) << name;
  }
  auto missing = file->ReadAsF32("nope", alloc);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no tensor named 'nope'"));
  EXPECT_FALSE(file->Contains("nope"));
}

TEST(Safetensors, Bf16StorageRoundsToNearestEven) {
  const std::string dir = testing::MakeTempDir("st");
  CpuAllocator alloc;
  Tensor t = RandomTensor(alloc, {64, 3}, 7);
  t.data<float>()[0] = 1.0f + 1.0f / 256.0f;  // tie: rounds down to 1.0
  const std::string path = dir + "/x.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"w", t}}, {}, DType::kBF16).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file->dtype("w"), SafetensorsDType::kBF16);
  EXPECT_EQ(file->RawBytes("w")->size(), 64u * 3 * 2);
  EXPECT_TRUE(file->metadata().empty());
  Tensor back = *file->ReadAsF32("w", alloc);
  EXPECT_EQ(back.data<float>()[0], 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    EXPECT_EQ(back.data<float>()[i], Bf16ToFloat(FloatToBf16(t.data<float>()[i])));
    EXPECT_NEAR(back.data<float>()[i], t.data<float>()[i], std::abs(t.data<float>()[i]) / 128.0f);
  }
  // Re-saving the bf16-valued tensor as bf16 is lossless.
  ASSERT_TRUE(WriteSafetensors(path, {{"w", back}}, {}, DType::kBF16).ok());
  EXPECT_EQ(Values(*SafetensorsFile::Open(path)->ReadAsF32("w", alloc)), Values(back));
}

TEST(Safetensors, IntegerAndBf16InputTensors) {
  const std::string dir = testing::MakeTempDir("st");
  CpuAllocator alloc;
  Tensor ids = *Tensor::Empty(alloc, {5}, DType::kI32);
  for (int i = 0; i < 5; ++i) ids.data<int32_t>()[i] = i * 1000 - 7;
  Tensor half = *Tensor::Empty(alloc, {4}, DType::kBF16);
  FillNormal(half, 3, 0.0f, 1.0f);
  const std::string path = dir + "/x.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"ids", ids}, {"half", half}}, {}, DType::kF32).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file->dtype("ids"), SafetensorsDType::kI32);
  EXPECT_EQ(*file->dtype("half"), SafetensorsDType::kF32);
  EXPECT_EQ(std::memcmp(file->RawBytes("ids")->data(), ids.raw_data(), 20), 0);
  Tensor back = *file->ReadAsF32("half", alloc);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back.data<float>()[i], Bf16ToFloat(half.data<bf16_t>()[i]));
  auto as_float = file->ReadAsF32("ids", alloc);
  EXPECT_EQ(as_float.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(as_float.status().message()),
              HasSubstr("tensor 'ids' is I32; only floating-point tensors"));
}

TEST(Safetensors, HalfToFloatIsExact) {
  EXPECT_EQ(HalfToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x8000), 0.0f);
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);                  // largest finite
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));  // signalling NaN stays NaN
  EXPECT_TRUE(std::isnan(HalfToFloat(0xfe00)));
  // Every finite half converts to the value its fields define.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint32_t exponent = (bits >> 10) & 0x1f;
    if (exponent == 0x1f) continue;
    const double mantissa = bits & 0x3ff;
    const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                                           : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    const double expected = (bits & 0x8000) ? -magnitude : magnitude;
    ASSERT_EQ(HalfToFloat(static_cast<uint16_t>(bits)), static_cast<float>(expected)) << bits;
  }
}

TEST(Safetensors, ReadsF16F64AndBf16Files) {
  const uint16_t halves[] = {0x3c00, 0x0001, 0x7c00, 0xc000};
  const double doubles[] = {0.1, -1e300, 3.0};
  const uint16_t bf16s[] = {0x3f80, 0xc040};  // 1.0, -3.0
  std::string data;
  data.append(reinterpret_cast<const char*>(halves), sizeof(halves));
  data.append(reinterpret_cast<const char*>(doubles), sizeof(doubles));
  data.append(reinterpret_cast<const char*>(bf16s), sizeof(bf16s));
  const std::string header = R"({"h":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},
      "d":{"dtype":"F64","shape":[3],"data_offsets":[8,32]},
      "b":{"dtype":"BF16","shape":[2],"data_offsets":[32,36]},
      "i":{"dtype":"I64","shape":[0],"data_offsets":[36,36]}})";
  auto file = SafetensorsFile::FromBytes(testing::SafetensorsImage(header, data), "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  CpuAllocator alloc;
  EXPECT_THAT(
      Values(*file->ReadAsF32("h", alloc)),
      ElementsAre(1.0f, std::ldexp(1.0f, -24), std::numeric_limits<float>::infinity(), -2.0f));
  EXPECT_THAT(Values(*file->ReadAsF32("d", alloc)),
              ElementsAre(0.1f, -std::numeric_limits<float>::infinity(), 3.0f));
  EXPECT_THAT(Values(*file->ReadAsF32("b", alloc)), ElementsAre(1.0f, -3.0f));
  EXPECT_EQ(*file->dtype("i"), SafetensorsDType::kI64);
  EXPECT_THAT(file->names(), ElementsAre("h", "d", "b", "i"));
}

TEST(Safetensors, AcceptsGapsTrailingBytesAndNullMetadata) {
  const std::string header = R"({"__metadata__": null,
      "a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},
      "b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
      "z":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})";
  auto file = SafetensorsFile::FromBytes(testing::SafetensorsImage(header, std::string(20, 0)));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(), ElementsAre("b", "z", "a"));
}

TEST(Safetensors, RejectsTruncatedFilesAndBadHeaderLengths) {
  EXPECT_THAT(OpenError(""), HasSubstr("too short for a safetensors header (0 bytes"));
  EXPECT_THAT(OpenError("abc"), HasSubstr("too short"));
  EXPECT_THAT(OpenError(testing::SafetensorsImage("{}", "", int64_t{1} << 40)),
              HasSubstr("header length 1099511627776 exceeds the limit of 100000000 bytes"));
  EXPECT_THAT(OpenError(testing::SafetensorsImage("{}", "", std::numeric_limits<int64_t>::max())),
              HasSubstr("exceeds the limit"));
  EXPECT_THAT(OpenError(testing::SafetensorsImage("{}", "", 3)),
              HasSubstr("header length 3 runs past the end of the file (10 bytes)"));

  // A real file cut short: the last tensor's range now lies outside.
  const std::string dir = testing::MakeTempDir("st");
  CpuAllocator alloc;
  const std::string path = dir + "/x.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"w", RandomTensor(alloc, {16}, 1)}}, {}, DType::kF32).ok());
  std::string bytes = testing::ReadFile(path);
  testing::WriteFile(path, bytes.substr(0, bytes.size() - 4));
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("tensor 'w': data_offsets [0, 64] lie outside the data section (60 "
                        "bytes)"));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
  testing::WriteFile(path, bytes.substr(0, 20));
  EXPECT_THAT(std::string(SafetensorsFile::Open(path).status().message()),
              HasSubstr("runs past the end of the file"));
  EXPECT_EQ(SafetensorsFile::Open(dir + "/missing.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Safetensors, RejectsMalformedHeaders) {
  EXPECT_THAT(HeaderError("{\"a\": ", 0), HasSubstr("header is not valid JSON (at byte"));
  EXPECT_THAT(HeaderError("{\"a\": 1,}", 0), HasSubstr("header is not valid JSON (at byte 9)"));
  EXPECT_THAT(HeaderError("[1, 2]", 0), HasSubstr("header must be a JSON object (got array)"));
  EXPECT_THAT(HeaderError("\"x\"", 0), HasSubstr("header must be a JSON object (got string)"));
  EXPECT_THAT(HeaderError(R"({"w": 3})", 0), HasSubstr("tensor 'w': entry must be an object"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
              HasSubstr("tensor 'w': unsupported dtype 'U8' (supported: F32, BF16, F16, F64, "
                        "I32, I64)"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1),
              HasSubstr("unsupported dtype 'F8_E4M3'"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("'dtype' must be a string"));
  EXPECT_THAT(HeaderError(R"({"w": {"shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': missing 'dtype'"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","data_offsets":[0,4]}})", 4),
              HasSubstr("missing 'shape'"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[1]}})", 4),
              HasSubstr("missing 'data_offsets'"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[2, 2],"data_offsets":[0,12]}})", 16),
              HasSubstr("tensor 'w': shape [2, 2] of F32 needs 16 bytes but data_offsets "
                        "[0, 12] hold 12"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
              HasSubstr("data_offsets [0, 16] lie outside the data section (12 bytes)"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 12),
              HasSubstr("data_offsets [8, 4] has begin after end"));
  EXPECT_THAT(HeaderError(R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                              "b": {"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          12),
              HasSubstr("tensors 'a' [0, 8) and 'b' [4, 12) have overlapping data_offsets"));
  EXPECT_THAT(HeaderError(R"({"a": {"dtype":"F32","shape":[4],"data_offsets":[0,16]},
                              "b": {"dtype":"F32","shape":[1],"data_offsets":[4,8]},
                              "c": {"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                          16),
              HasSubstr("overlapping"));
  EXPECT_THAT(HeaderError(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                              "a": {"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          8),
              HasSubstr("header has the name 'a' twice"));
  EXPECT_THAT(
      HeaderError(R"({"a": {"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4),
      HasSubstr("header repeats the key 'dtype' in one object"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[-1, 2],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': 'shape' element 0 must be a non-negative integer (got "
                        "number -1)"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
              HasSubstr("'shape' element 0 must be a non-negative integer"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4),
              HasSubstr("'shape' must be a list"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[4611686018427387904, 8],
                                    "data_offsets":[0,4]}})",
                          4),
              HasSubstr("'shape' has too many elements"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F64","shape":[4611686018427387904],
                                    "data_offsets":[0,4]}})",
                          4),
              HasSubstr("needs more than 2^64 bytes but data_offsets [0, 4] hold 4"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8),
              HasSubstr("'data_offsets' must be [begin, end]"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8),
              HasSubstr("'data_offsets' must be [begin, end]"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0.0,4.0]}})", 8),
              HasSubstr("'data_offsets' must be [begin, end]"));
  EXPECT_THAT(HeaderError(R"({"__metadata__": {"format": 1}})", 0),
              HasSubstr("__metadata__ must map strings to strings (key 'format' has number 1)"));
  EXPECT_THAT(HeaderError(R"({"__metadata__": [1]})", 0),
              HasSubstr("__metadata__ must be an object"));
  EXPECT_THAT(HeaderError("{\"\xff\": 1}", 0), HasSubstr("not valid JSON"));
  EXPECT_THAT(HeaderError("{\"a\": 67E767}", 0), HasSubstr("header is not valid JSON"));
  // Deep nesting is refused before parsing, never a stack overflow; shallow
  // nesting is just another malformed entry.
  EXPECT_THAT(
      HeaderError(absl::StrCat("{\"w\": ", std::string(100000, '['), std::string(100000, ']'), "}"),
                  0),
      HasSubstr("bad.safetensors: header: JSON nested deeper than 64 levels (at byte 69)"));
  EXPECT_THAT(
      HeaderError(absl::StrCat("{\"w\": ", std::string(60, '['), std::string(60, ']'), "}"), 0),
      HasSubstr("entry must be an object"));
}

TEST(Safetensors, WriterRejectsBadInput) {
  const std::string dir = testing::MakeTempDir("st");
  CpuAllocator alloc;
  Tensor t = RandomTensor(alloc, {2}, 1);
  const std::string path = dir + "/x.safetensors";
  EXPECT_THAT(std::string(WriteSafetensors(path, {{"a", t}, {"a", t}}, {}, DType::kF32).message()),
              HasSubstr("tensor 'a': the name is given twice"));
  EXPECT_THAT(std::string(WriteSafetensors(path, {{"__metadata__", t}}, {}, DType::kF32).message()),
              HasSubstr("reserved"));
  EXPECT_THAT(std::string(WriteSafetensors(path, {{"a", t}}, {}, DType::kI32).message()),
              HasSubstr("storage dtype must be f32 or bf16"));
  EXPECT_THAT(std::string(WriteSafetensors(path, {{"a", Tensor()}}, {}, DType::kF32).message()),
              HasSubstr("undefined"));
  EXPECT_THAT(std::string(WriteSafetensors(path, {{"bad\xff", t}}, {}, DType::kF32).message()),
              HasSubstr("not valid UTF-8"));
  EXPECT_THAT(
      std::string(WriteSafetensors(dir + "/no/such/dir/x.safetensors", {{"a", t}}, {}, DType::kF32)
                      .message()),
      HasSubstr("No such file or directory"));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Safetensors, OverwriteReplacesTheWholeFile) {
  const std::string dir = testing::MakeTempDir("st");
  CpuAllocator alloc;
  const std::string path = dir + "/x.safetensors";
  ASSERT_TRUE(
      WriteSafetensors(path, {{"big", RandomTensor(alloc, {1000}, 1)}}, {}, DType::kF32).ok());
  auto old_file = SafetensorsFile::Open(path);  // keeps its mapping of the old inode
  ASSERT_TRUE(old_file.ok());
  Tensor small = RandomTensor(alloc, {3}, 2);
  ASSERT_TRUE(WriteSafetensors(path, {{"small", small}}, {}, DType::kF32).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(), ElementsAre("small"));
  EXPECT_EQ(Values(*file->ReadAsF32("small", alloc)), Values(small));
  EXPECT_EQ(old_file->ReadAsF32("big", alloc)->numel(), 1000);
}

TEST(ShardedSafetensors, RoundTripAcrossShards) {
  const std::string dir = testing::MakeTempDir("shard");
  CpuAllocator alloc;
  NamedTensors tensors;
  for (int i = 0; i < 6; ++i) {
    tensors.emplace_back(absl::StrCat("t", i), RandomTensor(alloc, {10}, i));  // 40 bytes
  }
  tensors.emplace_back("huge", RandomTensor(alloc, {100}, 9));  // 400 bytes > max
  tensors.emplace_back("tail", RandomTensor(alloc, {5}, 10));
  auto shards =
      WriteShardedSafetensors(dir, "model", tensors, {{"format", "pt"}}, DType::kF32, 100);
  ASSERT_TRUE(shards.ok()) << shards.status();
  // [t0 t1] [t2 t3] [t4 t5] [huge] [tail]
  EXPECT_THAT(*shards,
              ElementsAre("model-00001-of-00005.safetensors", "model-00002-of-00005.safetensors",
                          "model-00003-of-00005.safetensors", "model-00004-of-00005.safetensors",
                          "model-00005-of-00005.safetensors"));
  const nlohmann::json index =
      nlohmann::json::parse(testing::ReadFile(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 6 * 40 + 400 + 20);
  EXPECT_EQ(index["weight_map"]["huge"], "model-00004-of-00005.safetensors");
  EXPECT_EQ(index["weight_map"]["t3"], "model-00002-of-00005.safetensors");

  auto sharded = OpenSafetensorsDirectory(dir);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ(sharded->names().size(), 8u);
  EXPECT_EQ(sharded->metadata().at("total_size"), "660");
  // Shards open lazily: a deleted shard only matters for its own tensors.
  std::filesystem::remove(dir + "/model-00001-of-00005.safetensors");
  for (size_t i = 2; i < tensors.size(); ++i) {
    auto read = sharded->ReadAsF32(tensors[i].first, alloc);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(Values(*read), Values(tensors[i].second));
  }
  EXPECT_EQ(sharded->Info("tail")->shape, (Shape{5}));
  auto lost = sharded->ReadAsF32("t0", alloc);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(lost.status().message()),
              HasSubstr("shard of tensor 't0': " + dir + "/model-00001-of-00005.safetensors"));
  EXPECT_EQ(sharded->ReadAsF32("nope", alloc).status().code(), absl::StatusCode::kNotFound);
}

TEST(ShardedSafetensors, Bf16ShardsAndSingleShard) {
  const std::string dir = testing::MakeTempDir("shard");
  CpuAllocator alloc;
  Tensor t = RandomTensor(alloc, {8}, 1);
  auto shards =
      WriteShardedSafetensors(dir, "model", {{"a", t}, {"b", t}}, {}, DType::kBF16, 1 << 20);
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(*shards, ElementsAre("model-00001-of-00001.safetensors"));
  auto sharded = ShardedSafetensors::OpenIndex(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ(sharded->Info("b")->dtype, SafetensorsDType::kBF16);
  Tensor back = *sharded->ReadAsF32("b", alloc);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(back.data<float>()[i], Bf16ToFloat(FloatToBf16(t.data<float>()[i])));
  }
  EXPECT_FALSE(WriteShardedSafetensors(dir, "model", {{"a", t}}, {}, DType::kF32, 0).ok());
}

TEST(ShardedSafetensors, RejectsBadIndexes) {
  const std::string dir = testing::MakeTempDir("shard");
  CpuAllocator alloc;
  ASSERT_TRUE(WriteSafetensors(dir + "/s1.safetensors", {{"a", RandomTensor(alloc, {2}, 1)}}, {},
                               DType::kF32)
                  .ok());
  const std::string index = dir + "/model.safetensors.index.json";
  auto error_of = [&](absl::string_view text) {
    testing::WriteFile(index, text);
    auto sharded = ShardedSafetensors::OpenIndex(index);
    EXPECT_FALSE(sharded.ok()) << text;
    return std::string(sharded.status().message());
  };
  EXPECT_THAT(error_of("{"), HasSubstr("index is not valid JSON (at byte 2)"));
  EXPECT_THAT(error_of("[]"), HasSubstr("index must be a JSON object"));
  EXPECT_THAT(error_of(R"({"metadata": {}})"), HasSubstr("'weight_map' must be an object"));
  EXPECT_THAT(error_of(R"({"weight_map": {"a": 3}})"),
              HasSubstr("weight_map entry 'a' must be a file name (got number 3)"));
  EXPECT_THAT(error_of(R"({"weight_map": {"a": "../s1.safetensors"}})"),
              HasSubstr("not a file inside the model directory"));
  EXPECT_THAT(error_of(R"({"weight_map": {"a": "/etc/passwd"}})"),
              HasSubstr("not a file inside the model directory"));
  EXPECT_THAT(error_of(R"({"weight_map": {"a": "s1.safetensors", "a": "s2.safetensors"}})"),
              HasSubstr("index repeats the key 'a' in one object"));

  // The index points at a shard that lacks the tensor.
  testing::WriteFile(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  auto sharded = ShardedSafetensors::OpenIndex(index);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_TRUE(sharded->ReadAsF32("a", alloc).ok());
  auto b = sharded->ReadAsF32("b", alloc);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("the index puts tensor 'b' in 's1.safetensors', which does not contain "
                        "it"));

  const std::string empty_dir = testing::MakeTempDir("empty");
  auto none = OpenSafetensorsDirectory(empty_dir);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("no model.safetensors or model.safetensors.index.json"));
}

TEST(ShardedSafetensors, IndexIsARegularFileOfBoundedSizeNamingFewShards) {
  namespace fs = std::filesystem;
  const std::string dir = testing::MakeTempDir("shard-hostile");
  const std::string index = dir + "/model.safetensors.index.json";
  auto error_of = [&] {
    const auto start = std::chrono::steady_clock::now();
    auto sharded = ShardedSafetensors::OpenIndex(index);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(sharded.status().code(), absl::StatusCode::kInvalidArgument) << sharded.status();
    return std::string(sharded.status().message());
  };
  testing::WriteFile(index, "{");
  fs::resize_file(index, uint64_t{20} << 30);
  EXPECT_EQ(error_of(), index +
                            ": has 21474836480 bytes, over the 64 MiB limit for a "
                            "safetensors index");
  fs::remove(index);
  ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
  EXPECT_THAT(error_of(), HasSubstr(index + ": is a FIFO, not a regular file"));
  fs::remove(index);
  fs::create_symlink("/dev/zero", index);
  EXPECT_THAT(error_of(), HasSubstr(index + ": is a character device, not a regular file"));
  fs::remove(index);

  nlohmann::json many = {{"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i <= kMaxSafetensorsShards; ++i) {
    many["weight_map"][absl::StrCat("t", i)] = absl::StrCat("s", i, ".safetensors");
  }
  testing::WriteFile(index, many.dump());
  EXPECT_EQ(error_of(), index + ": weight_map names more than 10000 shard files, the limit");
  testing::WriteFile(index, absl::StrCat("{\"weight_map\": ", std::string(100000, '{'), "}"));
  EXPECT_EQ(error_of(), index + ": index: JSON nested deeper than 64 levels (at byte 78)");
}

TEST(Safetensors, OpenReadsOnlyRegularFiles) {
  namespace fs = std::filesystem;
  const std::string dir = testing::MakeTempDir("safetensors-hostile");
  const std::string fifo = dir + "/model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto file = SafetensorsFile::Open(fifo);  // must not wait for a writer
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(fifo + ": is a FIFO"));
  EXPECT_THAT(std::string(OpenSafetensorsDirectory(dir).status().message()),
              HasSubstr("is a FIFO, not a regular file"));
  fs::create_symlink("/dev/zero", dir + "/zero.safetensors");
  EXPECT_THAT(std::string(SafetensorsFile::Open(dir + "/zero.safetensors").status().message()),
              HasSubstr("is a character device, not a regular file"));
}

TEST(Safetensors, HugeDeclaredTensorsNeedTheirBytesInTheFile) {
  // A header can declare any shape; only what the file holds is accepted, so
  // nothing is allocated for a tensor the file does not contain.
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[4294967296, 4294967296],
                               "data_offsets":[0, 8]}})",
                          8),
              HasSubstr("'shape' has too many elements"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F64","shape":[2147483648, 2147483648],
                               "data_offsets":[0, 8]}})",
                          8),
              HasSubstr("needs more than 2^64 bytes"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype":"F32","shape":[1048576, 1048576],
                               "data_offsets":[0, 4398046511104]}})",
                          8),
              HasSubstr("lie outside the data section (8 bytes)"));
}

}  // namespace
}  // namespace sbp
