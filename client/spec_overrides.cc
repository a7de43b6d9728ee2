#include "client/spec_overrides.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "worker/train/job_spec.h"

namespace sbp::cli {
namespace {

bool ValidKeyPart(absl::string_view part) {
  if (part.empty()) return false;
  for (char c : part) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Sets root[path...] = value, creating mappings on the way.
absl::Status SetPath(YAML::Node root, const std::vector<std::string>& path, const YAML::Node& value,
                     const std::string& override_text) {
  YAML::Node node = root;
  std::string walked;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    absl::StrAppend(&walked, walked.empty() ? "" : ".", path[i]);
    YAML::Node child = node[path[i]];
    if (!child.IsDefined() || child.IsNull()) {
      node[path[i]] = YAML::Node(YAML::NodeType::Map);
      child = node[path[i]];
    } else if (!child.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--set ", override_text, ": ", walked, " is not a mapping in the spec"));
    }
    node.reset(child);  // rebinds (operator= would overwrite the node it refers to)
  }
  node[path.back()] = value;
  return absl::OkStatus();
}

}  // namespace

void AddSetOption(CLI::App& command, std::vector<std::string>& overrides) {
  command.add_option("--set", overrides,
                     "override a job spec field: KEY=VALUE with a dotted key, e.g. "
                     "--set train.lr=2e-4 (repeatable; the value is read as YAML)");
}

absl::StatusOr<std::string> ApplySpecOverrides(const std::string& spec_yaml,
                                               const std::vector<std::string>& overrides) {
  if (overrides.empty()) return spec_yaml;
  try {
    YAML::Node root = YAML::Load(spec_yaml);
    if (!root.IsMap()) return absl::InvalidArgumentError("the job spec is not a YAML mapping");
    for (const std::string& text : overrides) {
      const size_t eq = text.find('=');
      if (eq == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("--set ", text, ": expected KEY=VALUE (e.g. train.lr=2e-4)"));
      }
      const std::vector<std::string> path = absl::StrSplit(text.substr(0, eq), '.');
      for (const std::string& part : path) {
        if (!ValidKeyPart(part)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--set ", text, ": the key must be dotted names of letters, digits and _ (got '",
              text.substr(0, eq), "')"));
        }
      }
      const std::string raw = text.substr(eq + 1);
      YAML::Node value;
      try {
        value = raw.empty() ? YAML::Node(std::string()) : YAML::Load(raw);
      } catch (const YAML::Exception& e) {
        return absl::InvalidArgumentError(
            absl::StrCat("--set ", text, ": the value is not YAML: ", e.msg));
      }
      if (absl::Status set = SetPath(root, path, value, text); !set.ok()) return set;
    }
    YAML::Emitter out;
    out << root;
    if (!out.good()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write the job spec with --set: ", out.GetLastError()));
    }
    return absl::StrCat(out.c_str(), "\n");
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the job spec: ", e.what()));
  }
}

absl::StatusOr<std::string> ReadJobSpecWithOverrides(const std::string& path,
                                                     const std::vector<std::string>& overrides) {
  absl::StatusOr<std::string> text = ReadJobSpecFile(path);
  if (!text.ok() || overrides.empty()) return text;
  absl::StatusOr<std::string> applied = ApplySpecOverrides(*text, overrides);
  if (!applied.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", applied.status().message()));
  }
  return applied;
}

std::string SpecSourceName(const std::string& path, const std::vector<std::string>& overrides) {
  return overrides.empty() ? path : absl::StrCat(path, " with --set");
}

}  // namespace sbp::cli
