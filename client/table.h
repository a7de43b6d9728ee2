// Aligned plain-text tables for the job verbs: a header row and data rows,
// each column padded to its widest cell, two spaces apart.
#pragma once

#include <string>
#include <vector>

namespace sbp::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Every row ends with '\n'; the last column is not padded.
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace sbp::cli
