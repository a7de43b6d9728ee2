#include "worker/train/jsonl_data.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace sbp {
namespace {

using Json = nlohmann::json;

absl::StatusOr<std::vector<int32_t>> TokenList(const Json& object, const char* field,
                                               absl::string_view where, bool allow_ignore) {
  const auto it = object.find(field);
  if (it == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": missing field '", field, "'"));
  }
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field '", field, "' must be an array of integers, got ",
                     it->type_name()));
  }
  std::vector<int32_t> out;
  out.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& v = (*it)[i];
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, "[", i,
                                                     "] must be an integer, got ", v.dump()));
    }
    const int64_t id = v.get<int64_t>();
    if (id < (allow_ignore ? kIgnoreIndex : 0) || id > INT32_MAX ||
        (id < 0 && id != kIgnoreIndex)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", field, "[", i, "] = ", id, " is not a valid token id"));
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

}  // namespace

absl::StatusOr<TokenSequence> ParseSftLine(absl::string_view line, int64_t vocab_size,
                                           absl::string_view where) {
  Json object = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": not valid JSON"));
  }
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected a JSON object, got ", object.type_name()));
  }
  TokenSequence s;
  if (object.contains("prompt_ids") || object.contains("completion_ids")) {
    ASSIGN_OR_RETURN(std::vector<int32_t> prompt, TokenList(object, "prompt_ids", where, false));
    ASSIGN_OR_RETURN(std::vector<int32_t> completion,
                     TokenList(object, "completion_ids", where, false));
    s.input_ids = prompt;
    s.input_ids.insert(s.input_ids.end(), completion.begin(), completion.end());
    s.labels.assign(prompt.size(), kIgnoreIndex);
    s.labels.insert(s.labels.end(), completion.begin(), completion.end());
  } else {
    ASSIGN_OR_RETURN(s.input_ids, TokenList(object, "input_ids", where, false));
    if (object.contains("labels")) {
      ASSIGN_OR_RETURN(s.labels, TokenList(object, "labels", where, true));
    } else {
      s.labels = s.input_ids;
    }
  }
  RETURN_IF_ERROR(ValidateSequence(s, vocab_size, where));
  return s;
}

absl::StatusOr<std::vector<TokenSequence>> LoadSftJsonl(const std::string& path,
                                                        int64_t vocab_size) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open data file '", path, "'"));
  std::vector<TokenSequence> out;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    ASSIGN_OR_RETURN(TokenSequence s,
                     ParseSftLine(line, vocab_size, absl::StrCat(path, ":", number)));
    out.push_back(std::move(s));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no sequences (the file is empty)"));
  }
  return out;
}

}  // namespace sbp
