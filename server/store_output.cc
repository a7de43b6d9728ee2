// Store: a job's output lines (server/job_output.h explains the caps).
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/store.h"

namespace sbp::server {
namespace {

// Past this stride a rank keeps only its line 0, which always fits.
constexpr int64_t kMaxStride = int64_t{1} << 40;

// Binds a batch's stream key (job, kind, attempt, rank) as parameters 1-4,
// the leading key columns of job_output and job_output_ranks.
sqlite::Statement& BindStream(sqlite::Statement& s, const OutputBatch& batch) {
  return s.Bind(1, batch.job_id)
      .Bind(2, int64_t{static_cast<int>(batch.kind)})
      .Bind(3, int64_t{batch.attempt})
      .Bind(4, int64_t{batch.rank});
}

bool OverCaps(const OutputSummary& s, const OutputCaps& caps) {
  return s.lines > caps.max_lines || s.bytes > caps.max_bytes;
}

}  // namespace

absl::StatusOr<OutputSummary> Store::LoadOutputSummary(const OutputBatch& batch) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT next_line, lines, bytes, dropped, stride FROM job_output_ranks "
                            "WHERE job_id = ? AND kind = ? AND attempt = ? AND rank = ?",
                            "reading a job's output state"));
  BindStream(*s, batch);
  OutputSummary summary;
  summary.attempt = batch.attempt;
  summary.rank = batch.rank;
  ASSIGN_OR_RETURN(bool row, s->Step());
  if (row) {
    summary.next_line = s->ColumnInt(0);
    summary.lines = s->ColumnInt(1);
    summary.bytes = s->ColumnInt(2);
    summary.dropped = s->ColumnInt(3);
    summary.stride = std::max<int64_t>(1, s->ColumnInt(4));
  }
  s->Reset();
  return summary;
}

absl::Status Store::SaveOutputSummary(const OutputBatch& batch, const OutputSummary& summary) {
  ASSIGN_OR_RETURN(
      sqlite::Statement * s,
      Prepared("INSERT INTO job_output_ranks (job_id, kind, attempt, rank, next_line, lines, "
               "bytes, dropped, stride) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
               "ON CONFLICT (job_id, kind, attempt, rank) DO UPDATE SET next_line = ?5, "
               "lines = ?6, bytes = ?7, dropped = ?8, stride = ?9",
               "saving a job's output state"));
  BindStream(*s, batch)
      .Bind(5, summary.next_line)
      .Bind(6, summary.lines)
      .Bind(7, summary.bytes)
      .Bind(8, summary.dropped)
      .Bind(9, summary.stride);
  return s->Run();
}

absl::Status Store::CountOutput(const OutputBatch& batch, OutputSummary& summary) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT count(*), coalesce(sum(length(CAST(text AS BLOB))), 0) "
                            "FROM job_output WHERE job_id = ? AND kind = ? AND attempt = ? AND "
                            "rank = ?",
                            "counting a job's output"));
  BindStream(*s, batch);
  ASSIGN_OR_RETURN(bool row, s->Step());
  summary.lines = row ? s->ColumnInt(0) : 0;
  summary.bytes = row ? s->ColumnInt(1) : 0;
  s->Reset();
  return absl::OkStatus();
}

absl::Status Store::ShrinkOutput(const OutputBatch& batch, const OutputCaps& caps,
                                 OutputSummary& summary) {
  if (batch.kind == OutputKind::kMetrics) {
    // Thinning: keep the lines numbered a multiple of the doubled stride.
    while (OverCaps(summary, caps) && summary.stride < kMaxStride) {
      summary.stride *= 2;
      ASSIGN_OR_RETURN(sqlite::Statement * s,
                       Prepared("DELETE FROM job_output WHERE job_id = ? AND kind = ? AND "
                                "attempt = ? AND rank = ? AND line_no % ? != 0",
                                "thinning a job's metrics"));
      BindStream(*s, batch).Bind(5, summary.stride);
      RETURN_IF_ERROR(s->Run());
      summary.dropped += db_->Changes();
      RETURN_IF_ERROR(CountOutput(batch, summary));
    }
    return absl::OkStatus();
  }
  // Logs: the head (the first lines, within a tenth of both caps) stays; the
  // oldest lines after it go until both are at nine tenths of the cap.
  std::vector<std::pair<int64_t, int64_t>> rows;  // (cursor, bytes), oldest first
  {
    ASSIGN_OR_RETURN(sqlite::Statement * s,
                     Prepared("SELECT cursor, length(CAST(text AS BLOB)) FROM job_output "
                              "WHERE job_id = ? AND kind = ? AND attempt = ? AND rank = ? "
                              "ORDER BY cursor",
                              "reading a job's log line sizes"));
    BindStream(*s, batch);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      rows.emplace_back(s->ColumnInt(0), s->ColumnInt(1));
    }
  }
  int64_t lines = static_cast<int64_t>(rows.size()), bytes = 0, head_bytes = 0;
  for (const auto& [cursor, size] : rows) bytes += size;
  size_t head = 0;
  while (head < rows.size() &&
         static_cast<int64_t>(head) < std::max<int64_t>(1, caps.max_lines / 10) &&
         head_bytes + rows[head].second <= caps.max_bytes / 10) {
    head_bytes += rows[head++].second;
  }
  size_t end = head;
  while (end < rows.size() &&
         (lines > caps.max_lines * 9 / 10 || bytes > caps.max_bytes * 9 / 10)) {
    bytes -= rows[end++].second;
    --lines;
  }
  if (end == head) return absl::OkStatus();
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("DELETE FROM job_output WHERE job_id = ? AND kind = ? AND "
                            "attempt = ? AND rank = ? AND cursor >= ? AND cursor <= ?",
                            "dropping a job's oldest log lines"));
  BindStream(*s, batch).Bind(5, rows[head].first).Bind(6, rows[end - 1].first);
  RETURN_IF_ERROR(s->Run());
  summary.dropped += static_cast<int64_t>(end - head);
  summary.lines = lines;
  summary.bytes = bytes;
  return absl::OkStatus();
}

absl::Status Store::AppendOutput(const std::vector<OutputBatch>& batches,
                                 const OutputCaps& metrics_caps, const OutputCaps& log_caps,
                                 absl::Time now) {
  ASSIGN_OR_RETURN(sqlite::Transaction tx, Begin());
  for (const OutputBatch& batch : batches) {
    if (batch.lines.empty()) continue;
    const OutputCaps& caps = batch.kind == OutputKind::kMetrics ? metrics_caps : log_caps;
    ASSIGN_OR_RETURN(OutputSummary summary, LoadOutputSummary(batch));
    for (size_t i = 0; i < batch.lines.size(); ++i) {
      const int64_t number = batch.first + static_cast<int64_t>(i);
      if (number < summary.next_line) continue;       // stored already: a retried batch
      summary.dropped += number - summary.next_line;  // the worker's own queue dropped these
      summary.next_line = number + 1;
      if (number % summary.stride != 0) {  // thinned out
        ++summary.dropped;
        continue;
      }
      ASSIGN_OR_RETURN(
          sqlite::Statement * s,
          Prepared("INSERT INTO job_output (job_id, kind, attempt, rank, line_no, step, time_us, "
                   "text) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   "storing a job's output"));
      BindStream(*s, batch)
          .Bind(5, number)
          .Bind(6, i < batch.steps.size() ? batch.steps[i] : int64_t{0})
          .Bind(7, absl::ToUnixMicros(now))
          .Bind(8, batch.lines[i]);
      RETURN_IF_ERROR(s->Run());
      ++summary.lines;
      summary.bytes += static_cast<int64_t>(batch.lines[i].size());
      if (OverCaps(summary, caps)) RETURN_IF_ERROR(ShrinkOutput(batch, caps, summary));
    }
    RETURN_IF_ERROR(SaveOutputSummary(batch, summary));
  }
  return tx.Commit();
}

absl::StatusOr<OutputPage> Store::ReadOutput(const OutputQuery& query) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT cursor, attempt, rank, time_us, text FROM job_output "
                            "WHERE job_id = ?1 AND kind = ?2 AND cursor > ?3 AND "
                            "(?4 = 0 OR attempt = ?4) AND step >= ?5 ORDER BY cursor LIMIT ?6",
                            "reading a job's output"));
  s->Bind(1, query.job_id)
      .Bind(2, int64_t{static_cast<int>(query.kind)})
      .Bind(3, query.after_cursor)
      .Bind(4, int64_t{query.attempt})
      .Bind(5, query.from_step)
      .Bind(6, int64_t{query.limit});
  OutputPage page;
  size_t bytes = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    OutputLine line;
    line.cursor = s->ColumnInt(0);
    line.attempt = static_cast<int>(s->ColumnInt(1));
    line.rank = static_cast<int>(s->ColumnInt(2));
    line.time = absl::FromUnixMicros(s->ColumnInt(3));
    line.text = s->ColumnText(4);
    bytes += line.text.size();
    page.lines.push_back(std::move(line));
    if (bytes >= kOutputPageBytes) break;
  }
  s->Reset();  // ends the read at once, also when the page was cut short
  page.more = static_cast<int>(page.lines.size()) >= query.limit || bytes >= kOutputPageBytes;
  return page;
}

absl::StatusOr<std::vector<OutputSummary>> Store::OutputSummaries(absl::string_view job_id,
                                                                  OutputKind kind, int attempt) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT attempt, rank, next_line, lines, bytes, dropped, stride "
                            "FROM job_output_ranks WHERE job_id = ?1 AND kind = ?2 AND "
                            "(?3 = 0 OR attempt = ?3) ORDER BY attempt, rank",
                            "reading a job's output summaries"));
  s->Bind(1, job_id).Bind(2, int64_t{static_cast<int>(kind)}).Bind(3, int64_t{attempt});
  std::vector<OutputSummary> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    OutputSummary summary;
    summary.attempt = static_cast<int>(s->ColumnInt(0));
    summary.rank = static_cast<int>(s->ColumnInt(1));
    summary.next_line = s->ColumnInt(2);
    summary.lines = s->ColumnInt(3);
    summary.bytes = s->ColumnInt(4);
    summary.dropped = s->ColumnInt(5);
    summary.stride = s->ColumnInt(6);
    out.push_back(summary);
  }
  return out;
}

}  // namespace sbp::server
