// docs/job-spec.md against the parser: the reference documents every key
// that ParseJobSpec accepts (JobSpecKeys) and no other, its literal
// defaults are the ones the parser fills in, and its annotated example
// parses.
//
// A documented key is a table row whose first cell is one code span
// (| `train.lr` | ...). Its default is the cell under the table's "Default"
// header; a default written as one code span (`1e-4`, `true`, `cosine`,
// `[0.9, 0.999]`), or a bare number or true/false, is a literal, and every
// literal default must be checked here through kDefaults (so that a default
// changed in the code, or in the doc, fails this test). Other defaults are
// prose ("same as `model`", "none") and are not checked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tests/worker/train/test_util.h"
#include "worker/train/job_spec.h"

namespace sbp {
namespace {

constexpr char kDocPath[] = "docs/job-spec.md";

std::string ReadDoc() {
  const std::string path = absl::StrCat(train_testing::SourceDir(), "/", kDocPath);
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The cells of a Markdown table row, trimmed ("\|" stays inside a cell).
std::vector<std::string> Cells(absl::string_view line) {
  std::vector<std::string> cells;
  std::string cell;
  line = absl::StripAsciiWhitespace(line);
  if (!line.empty() && line.front() == '|') line.remove_prefix(1);
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  if (!absl::StripAsciiWhitespace(cell).empty()) {
    cells.emplace_back(absl::StripAsciiWhitespace(cell));
  }
  return cells;
}

// The text of a cell that is exactly one code span (`x`).
std::optional<std::string> CodeSpan(absl::string_view cell) {
  if (cell.size() < 3 || cell.front() != '`' || cell.back() != '`') return std::nullopt;
  const absl::string_view inner = cell.substr(1, cell.size() - 2);
  if (inner.find('`') != absl::string_view::npos) return std::nullopt;
  return std::string(inner);
}

bool IsSeparatorRow(const std::vector<std::string>& cells) {
  if (cells.empty()) return false;
  for (const std::string& cell : cells) {
    if (cell.empty() || cell.find_first_not_of("-: ") != std::string::npos) return false;
  }
  return true;
}

bool IsNumber(absl::string_view text) {
  double unused;
  return !text.empty() && text.find_first_not_of("+-0123456789.eE") == absl::string_view::npos &&
         absl::SimpleAtod(text, &unused);
}

bool IsBareWord(absl::string_view text) {
  if (text.empty() || !(absl::ascii_isalpha(text[0]) || text[0] == '_')) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

bool IsScalarLiteral(absl::string_view text) { return IsNumber(text) || IsBareWord(text); }

// The items of "[a, b]" (nullopt when `text` is not such a list).
std::optional<std::vector<std::string>> ListItems(absl::string_view text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return std::nullopt;
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text.substr(1, text.size() - 2), ',')) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

// The literal a Default cell holds, if it holds one.
std::optional<std::string> LiteralDefault(absl::string_view cell) {
  if (std::optional<std::string> code = CodeSpan(cell)) {
    if (IsScalarLiteral(*code)) return code;
    if (std::optional<std::vector<std::string>> items = ListItems(*code)) {
      if (!items->empty() && std::all_of(items->begin(), items->end(),
                                         [](const std::string& i) { return IsScalarLiteral(i); })) {
        return code;
      }
    }
    return std::nullopt;
  }
  if (IsNumber(cell) || cell == "true" || cell == "false") return std::string(cell);
  return std::nullopt;
}

bool SameScalar(absl::string_view doc, absl::string_view code) {
  double a, b;
  if (IsNumber(doc) && absl::SimpleAtod(doc, &a) && absl::SimpleAtod(code, &b)) {
    return a == b || std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
  }
  return doc == code;
}

bool SameValue(absl::string_view doc, absl::string_view code) {
  std::optional<std::vector<std::string>> doc_items = ListItems(doc);
  std::optional<std::vector<std::string>> code_items = ListItems(code);
  if (doc_items.has_value() || code_items.has_value()) {
    if (!doc_items || !code_items || doc_items->size() != code_items->size()) return false;
    for (size_t i = 0; i < doc_items->size(); ++i) {
      if (!SameScalar((*doc_items)[i], (*code_items)[i])) return false;
    }
    return true;
  }
  return SameScalar(doc, code);
}

struct DocRow {
  std::string key;
  std::optional<std::string> default_cell;  // nullopt: the table has no Default column
  int line = 0;
};

// The documented keys: rows of every table whose first cell is a code span,
// outside fenced code blocks.
std::vector<DocRow> DocumentedRows(const std::string& doc) {
  std::vector<DocRow> rows;
  bool in_fence = false;
  bool in_table = false;
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t default_column = kNone;  // of the current table
  int number = 0;
  for (absl::string_view line : absl::StrSplit(doc, '\n')) {
    ++number;
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(text, "```")) {
      in_fence = !in_fence;
      continue;
    }
    if (in_fence || text.empty() || text.front() != '|') {
      in_table = false;
      continue;
    }
    const std::vector<std::string> cells = Cells(text);
    if (!in_table) {  // the header row
      in_table = true;
      default_column = kNone;
      for (size_t i = 0; i < cells.size(); ++i) {
        if (absl::AsciiStrToLower(cells[i]) == "default") default_column = i;
      }
      continue;
    }
    if (IsSeparatorRow(cells) || cells.empty()) continue;
    std::optional<std::string> key = CodeSpan(cells[0]);
    if (!key) continue;
    DocRow row{*key, std::nullopt, number};
    if (default_column < cells.size()) row.default_cell = cells[default_column];
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::string> DocumentedKeys(const std::vector<DocRow>& rows) {
  std::vector<std::string> keys;
  for (const DocRow& row : rows) keys.push_back(row.key);
  return keys;
}

// ---------------------------------------------------------------------------
// Specs in which a key is absent, and the parsed value of each key.

constexpr char kMinimal[] = "name: job\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 64\n";
constexpr char kDataMapping[] =
    "name: job\nmodel: m\ndata: {path: d.jsonl}\nobjective: sft\nseq_len: 64\n";
constexpr char kWithLora[] =
    "name: job\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 64\nlora: {r: 4}\n";
constexpr char kWithEval[] =
    "name: job\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 64\neval: {data: v.jsonl}\n";
constexpr char kOnlineGrpo[] =
    "name: job\nmodel: m\ndata: p.jsonl\nobjective: grpo\nseq_len: 512\n"
    "grpo: {rollout: {group_size: 4}, reward: {function: token_match}}\n";

std::string Num(double v) { return absl::StrFormat("%.17g", v); }
std::string Num(int64_t v) { return absl::StrCat(v); }
std::string Bool(bool v) { return v ? "true" : "false"; }
std::string Chunk(int64_t v) { return v == 0 ? "auto" : absl::StrCat(v); }

struct DefaultCheck {
  const char* key;
  const char* base;  // a spec without the key
  std::function<std::string(const JobSpec&)> value;
};

const std::vector<DefaultCheck>& Defaults() {
  static const auto* checks = new std::vector<DefaultCheck>{
      // top level
      {"truncation", kMinimal,
       [](const JobSpec& s) { return std::string(TruncationName(s.truncation)); }},
      {"log_every_steps", kMinimal, [](const JobSpec& s) { return Num(s.log_every_steps); }},
      {"max_restarts", kMinimal, [](const JobSpec& s) { return Num(s.max_restarts); }},
      {"priority", kMinimal, [](const JobSpec& s) { return Num(s.priority); }},
      {"data.packing", kDataMapping, [](const JobSpec& s) { return Bool(s.data_packing); }},
      // streambp
      {"streambp.mode", kMinimal,
       [](const JobSpec& s) { return std::string(BackwardModeName(s.streambp.mode)); }},
      {"streambp.chunk_tokens", kMinimal,
       [](const JobSpec& s) { return Chunk(s.streambp.chunk_tokens); }},
      {"streambp.logits_chunk_tokens", kMinimal,
       [](const JobSpec& s) { return Chunk(s.streambp.logits_chunk_tokens); }},
      {"streambp.offload.checkpoints", kMinimal,
       [](const JobSpec& s) {
         const std::optional<CheckpointTier>& tier = s.streambp.offload.checkpoints;
         return tier ? std::string(CheckpointTierName(*tier)) : std::string("auto");
       }},
      // train
      {"train.steps", kMinimal, [](const JobSpec& s) { return Num(s.train.steps); }},
      {"train.sequences_per_step", kMinimal,
       [](const JobSpec& s) { return Num(s.train.sequences_per_step); }},
      {"train.lr", kMinimal, [](const JobSpec& s) { return Num(s.train.lr); }},
      {"train.schedule", kMinimal,
       [](const JobSpec& s) { return std::string(LrScheduleName(s.train.schedule)); }},
      {"train.warmup_steps", kMinimal, [](const JobSpec& s) { return Num(s.train.warmup_steps); }},
      {"train.min_lr_ratio", kMinimal, [](const JobSpec& s) { return Num(s.train.min_lr_ratio); }},
      {"train.weight_decay", kMinimal, [](const JobSpec& s) { return Num(s.train.weight_decay); }},
      {"train.beta1", kMinimal, [](const JobSpec& s) { return Num(s.train.beta1); }},
      {"train.beta2", kMinimal, [](const JobSpec& s) { return Num(s.train.beta2); }},
      {"train.betas", kMinimal,
       [](const JobSpec& s) {
         return absl::StrCat("[", Num(s.train.beta1), ", ", Num(s.train.beta2), "]");
       }},
      {"train.eps", kMinimal, [](const JobSpec& s) { return Num(s.train.eps); }},
      {"train.max_grad_norm", kMinimal,
       [](const JobSpec& s) { return Num(s.train.max_grad_norm); }},
      {"train.seed", kMinimal, [](const JobSpec& s) { return Num(s.train.seed); }},
      {"train.precision", kMinimal,
       [](const JobSpec& s) { return std::string(PrecisionName(s.train.precision)); }},
      {"train.epochs", kMinimal, [](const JobSpec& s) { return Num(s.train.epochs); }},
      {"train.shuffle", kMinimal, [](const JobSpec& s) { return Bool(s.train.shuffle); }},
      {"train.optimizer_offload", kMinimal,
       [](const JobSpec& s) { return Bool(s.train.optimizer_offload); }},
      {"train.zero_stage", kMinimal, [](const JobSpec& s) { return Num(s.train.zero_stage); }},
      // dpo, grpo
      {"dpo.beta", kMinimal, [](const JobSpec& s) { return Num(s.dpo.beta); }},
      {"grpo.beta", kMinimal, [](const JobSpec& s) { return Num(s.grpo.beta); }},
      {"grpo.epsilon", kMinimal, [](const JobSpec& s) { return Num(s.grpo.epsilon); }},
      {"grpo.loss", kMinimal,
       [](const JobSpec& s) { return std::string(GrpoLossName(s.grpo.loss)); }},
      {"grpo.rollout.max_new_tokens", kOnlineGrpo,
       [](const JobSpec& s) { return Num(s.grpo.rollout.max_new_tokens); }},
      {"grpo.rollout.temperature", kOnlineGrpo,
       [](const JobSpec& s) { return Num(s.grpo.rollout.temperature); }},
      {"grpo.rollout.top_p", kOnlineGrpo,
       [](const JobSpec& s) { return Num(s.grpo.rollout.top_p); }},
      {"grpo.rollout.top_k", kOnlineGrpo,
       [](const JobSpec& s) { return Num(s.grpo.rollout.top_k); }},
      {"grpo.reward.reference_field", kOnlineGrpo,
       [](const JobSpec& s) { return s.grpo.reward.reference_field; }},
      {"grpo.reward.timeout_s", kOnlineGrpo,
       [](const JobSpec& s) { return Num(s.grpo.reward.timeout_s); }},
      {"grpo.reward.length_penalty_buffer", kOnlineGrpo,
       [](const JobSpec& s) { return Num(s.grpo.reward.length_penalty_buffer); }},
      {"grpo.reward.length_penalty_weight", kOnlineGrpo,
       [](const JobSpec& s) { return Num(s.grpo.reward.length_penalty_weight); }},
      // resources, checkpoint
      {"resources.world_size", kMinimal,
       [](const JobSpec& s) { return Num(s.resources.world_size); }},
      {"resources.sequence_parallel", kMinimal,
       [](const JobSpec& s) { return Num(s.resources.sequence_parallel); }},
      {"resources.device", kMinimal,
       [](const JobSpec& s) { return std::string(DeviceKindName(s.resources.device)); }},
      {"checkpoint.every_steps", kMinimal,
       [](const JobSpec& s) { return Num(s.checkpoint.every_steps); }},
      {"checkpoint.keep_last", kMinimal,
       [](const JobSpec& s) { return Num(s.checkpoint.keep_last); }},
      // lora, eval
      {"lora.rslora", kWithLora, [](const JobSpec& s) { return Bool(s.lora.rslora); }},
      {"lora.init_seed", kWithLora,
       [](const JobSpec& s) { return Num(static_cast<int64_t>(s.lora.init_seed)); }},
      {"lora.dropout", kWithLora, [](const JobSpec& s) { return Num(s.lora.dropout); }},
      {"eval.every_steps", kWithEval, [](const JobSpec& s) { return Num(s.eval.every_steps); }},
      {"eval.max_examples", kWithEval, [](const JobSpec& s) { return Num(s.eval.max_examples); }},
  };
  return *checks;
}

// ---------------------------------------------------------------------------

// `kMinimal` with `dotted` set to null: `a: {b: {c: null}}` (replacing a
// top-level line of the same name).
std::string SpecWithKey(absl::string_view dotted) {
  const std::vector<std::string> parts = absl::StrSplit(dotted, '.');
  std::string value = "null";
  for (size_t i = parts.size(); i-- > 1;) value = absl::StrCat("{", parts[i], ": ", value, "}");
  std::string spec;
  for (absl::string_view line : absl::StrSplit(kMinimal, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, absl::StrCat(parts[0], ":"))) absl::StrAppend(&spec, line, "\n");
  }
  return absl::StrCat(spec, parts[0], ": ", value, "\n");
}

bool RefusedAsUnknown(absl::string_view dotted) {
  const absl::StatusOr<JobSpec> spec = ParseJobSpec(SpecWithKey(dotted), "job.yaml");
  return !spec.ok() && absl::StrContains(spec.status().message(), "unknown key");
}

TEST(JobSpecKeysTest, ListsTopLevelBlockAndNestedKeys) {
  const std::vector<std::string> keys = JobSpecKeys();
  for (const char* key :
       {"name", "seq_len", "data", "data.path", "data.packing", "train", "train.lr", "train.betas",
        "streambp.offload", "streambp.offload.checkpoints", "grpo.rollout", "grpo.rollout.top_k",
        "grpo.reward.command", "lora.target_modules", "eval.max_examples"}) {
    EXPECT_THAT(keys, ::testing::Contains(key));
  }
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "a key twice";
}

TEST(JobSpecKeysTest, ParserAcceptsEveryListedKey) {
  ASSERT_TRUE(RefusedAsUnknown("train.not_a_key"));
  ASSERT_TRUE(RefusedAsUnknown("streambp.offload.not_a_key"));
  ASSERT_TRUE(RefusedAsUnknown("not_a_key"));
  for (const std::string& key : JobSpecKeys()) {
    EXPECT_FALSE(RefusedAsUnknown(key)) << key << ":\n" << SpecWithKey(key);
  }
}

TEST(JobSpecDocsTest, DocumentsEveryKeyTheParserAccepts) {
  const std::vector<DocRow> rows = DocumentedRows(ReadDoc());
  ASSERT_FALSE(rows.empty()) << kDocPath << " has no key tables";
  const std::vector<std::string> documented = DocumentedKeys(rows);
  const std::vector<std::string> accepted = JobSpecKeys();

  std::vector<std::string> missing;
  for (const std::string& key : accepted) {
    if (std::find(documented.begin(), documented.end(), key) == documented.end()) {
      missing.push_back(key);
    }
  }
  std::vector<std::string> extra;
  std::vector<std::string> twice;
  for (size_t i = 0; i < documented.size(); ++i) {
    const std::string& key = documented[i];
    if (std::find(accepted.begin(), accepted.end(), key) == accepted.end()) {
      extra.push_back(absl::StrCat(key, " (line ", rows[i].line, ")"));
    }
    if (std::find(documented.begin(), documented.begin() + i, key) != documented.begin() + i) {
      twice.push_back(absl::StrCat(key, " (line ", rows[i].line, ")"));
    }
  }
  EXPECT_TRUE(missing.empty()) << kDocPath << " lacks a row for keys the parser accepts: "
                               << absl::StrJoin(missing, ", ");
  EXPECT_TRUE(extra.empty()) << kDocPath << " documents keys the parser does not accept: "
                             << absl::StrJoin(extra, ", ");
  EXPECT_TRUE(twice.empty()) << kDocPath << " documents keys twice: " << absl::StrJoin(twice, ", ");
}

TEST(JobSpecDocsTest, EveryKeyRowHasADefault) {
  for (const DocRow& row : DocumentedRows(ReadDoc())) {
    EXPECT_TRUE(row.default_cell.has_value() && !row.default_cell->empty())
        << kDocPath << ":" << row.line << ": `" << row.key
        << "` is in a table without a Default column (or the cell is empty)";
  }
}

TEST(JobSpecDocsTest, LiteralDefaultsAreTheParsersDefaults) {
  const std::vector<DocRow> rows = DocumentedRows(ReadDoc());
  std::vector<std::string> literal_keys;
  for (const DocRow& row : rows) {
    if (!row.default_cell) continue;
    const std::optional<std::string> literal = LiteralDefault(*row.default_cell);
    if (!literal) continue;
    literal_keys.push_back(row.key);
    const auto check = std::find_if(Defaults().begin(), Defaults().end(),
                                    [&](const DefaultCheck& c) { return row.key == c.key; });
    if (check == Defaults().end()) {
      ADD_FAILURE() << kDocPath << ":" << row.line << ": `" << row.key << "` has the default `"
                    << *literal
                    << "`, which no entry of Defaults() in this test checks; add one that "
                       "reads the parsed field";
      continue;
    }
    const absl::StatusOr<JobSpec> spec = ParseJobSpec(check->base, "base.yaml");
    ASSERT_TRUE(spec.ok()) << row.key << ": " << spec.status();
    const std::string parsed = check->value(*spec);
    EXPECT_TRUE(SameValue(*literal, parsed))
        << kDocPath << ":" << row.line << ": `" << row.key << "` is documented with default `"
        << *literal << "`, but ParseJobSpec gives " << parsed << " when it is absent";
  }
  // Each check has a row with a literal default to check.
  for (const DefaultCheck& check : Defaults()) {
    EXPECT_THAT(literal_keys, ::testing::Contains(check.key))
        << "`" << check.key << "` has no literal default in " << kDocPath;
  }
  // The test reaches every block named in the brief.
  for (const char* block :
       {"train.", "checkpoint.", "resources.", "streambp.", "eval.", "lora.", "dpo.", "grpo."}) {
    EXPECT_TRUE(std::any_of(literal_keys.begin(), literal_keys.end(),
                            [&](const std::string& k) { return absl::StartsWith(k, block); }))
        << "no literal default checked under " << block;
  }
}

TEST(JobSpecDocsTest, AnnotatedExampleParses) {
  const std::string doc = ReadDoc();
  const size_t open = doc.find("```yaml\n");
  ASSERT_NE(open, std::string::npos) << kDocPath << " has no ```yaml block";
  const size_t start = open + std::string("```yaml\n").size();
  const size_t close = doc.find("\n```", start);
  ASSERT_NE(close, std::string::npos) << "the ```yaml block is not closed";
  const std::string example = doc.substr(start, close - start + 1);
  const absl::StatusOr<JobSpec> spec = ParseJobSpec(example, "docs/job-spec.md example");
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << example;
  // It parses to what it says, and writes back the same.
  const absl::StatusOr<JobSpec> again = ParseJobSpec(JobSpecToYaml(*spec), "canonical.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *spec);
}

}  // namespace
}  // namespace sbp
