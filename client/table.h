// Aligned plain-text tables for the job verbs: a header row and data rows,
// each column padded to its widest cell, two spaces apart.
#pragma once

#include <string>
#include <vector>

namespace sbp::cli {

// `text` with every control character (C0, DEL, and C1 encoded in UTF-8)
// written as \xNN: an escape sequence in a name cannot move the cursor,
// recolour or retitle the terminal.
std::string TerminalSafe(const std::string& text);

class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  // Cells are shown as TerminalSafe makes them: text from another party (a
  // worker's name, a job's reason) never drives the terminal.
  void AddRow(std::vector<std::string> row);
  // Every row ends with '\n'; the last column is not padded.
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace sbp::cli
