#include "client/output_commands.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli_common.h"
#include "client/metrics_client.h"
#include "client/metrics_format.h"
#include "client/table.h"
#include "common/byte_size.h"

namespace sbp::cli {
namespace {

namespace v1 = streambp::v1;

struct OutputArgs {
  std::string id;
  std::string output = "table";  // metrics: table, json or csv
  int attempt = 0;
  int64_t from_step = 0;
  bool follow = false;
};

OutputReadOptions ReadOptions(const OutputArgs& args) {
  OutputReadOptions options;
  options.attempt = args.attempt;
  options.from_step = args.from_step;
  options.follow = args.follow;
  return options;
}

// What the coordinator's cap left out, on stderr (nothing when nothing was).
void ReportDropped(const char* command, const OutputKept& kept, bool metrics) {
  const std::string cap = absl::StrCat(kept.max_lines, " lines / ", FormatByteSize(kept.max_bytes));
  for (const v1::JobOutputSummary& s : kept.summaries) {
    if (s.dropped() == 0) continue;
    const std::string where = metrics ? absl::StrCat("attempt ", s.attempt())
                                      : absl::StrCat("attempt ", s.attempt(), " rank ", s.rank());
    if (metrics) {
      std::fprintf(stderr,
                   "sbp %s: %s: %lld lines dropped; the coordinator keeps %s per attempt and "
                   "thins beyond (now every %lld%s line); metrics.jsonl in the run directory has "
                   "them all\n",
                   command, where.c_str(), static_cast<long long>(s.dropped()), cap.c_str(),
                   static_cast<long long>(s.stride()), s.stride() == 2 ? "nd" : "th");
    } else {
      std::fprintf(stderr,
                   "sbp %s: %s: %lld lines dropped; the coordinator keeps %s per attempt and "
                   "rank (the first tenth and the newest); the worker's own log has them all\n",
                   command, where.c_str(), static_cast<long long>(s.dropped()), cap.c_str());
    }
  }
}

int Metrics(const GlobalOptions& global, const OutputArgs& args) {
  if (args.output == "csv" && args.follow) {
    return ReportError("metrics", absl::InvalidArgumentError(
                                      "-o csv: its header is the union of every line's keys, "
                                      "known only at the end; leave out --follow, or use -o json"));
  }
  int code = kExitOk;
  auto client = ConnectOrReport(global, "metrics", &code);
  if (!client) return code;
  const bool table = args.output == "table", json = args.output == "json";
  const bool with_attempt = args.attempt == 0;
  bool header = false;
  std::vector<std::string> lines;  // csv
  OutputKept kept;
  const absl::Status status = ReadJobOutput(
      *client, CoordinatorClient::Output::kMetrics, args.id, ReadOptions(args),
      [&](const v1::JobOutputLine& line) {
        if (json) {
          std::printf("%s\n", line.text().c_str());
        } else if (table) {
          if (!header) std::printf("%s", MetricsTableHeader(with_attempt).c_str());
          header = true;
          std::printf("%s", MetricsTableRow(line.text(), line.attempt(), with_attempt).c_str());
        } else {
          lines.push_back(line.text());
        }
        if (args.follow) std::fflush(stdout);
      },
      &kept);
  if (!status.ok()) return ReportRpcError("metrics", status);
  if (args.output == "csv") std::printf("%s", MetricsCsv(lines).c_str());
  if (table && !header)
    std::fprintf(stderr, "sbp metrics: job %s has no metrics lines yet\n", args.id.c_str());
  ReportDropped("metrics", kept, /*metrics=*/true);
  return kExitOk;
}

int Logs(const GlobalOptions& global, const OutputArgs& args) {
  int code = kExitOk;
  auto client = ConnectOrReport(global, "logs", &code);
  if (!client) return code;
  int attempt = 0;
  OutputKept kept;
  const absl::Status status = ReadJobOutput(
      *client, CoordinatorClient::Output::kLogs, args.id, ReadOptions(args),
      [&](const v1::JobOutputLine& line) {
        if (args.attempt == 0 && line.attempt() != attempt) {
          attempt = line.attempt();
          std::printf("--- attempt %d\n", attempt);
        }
        // Lines come from the worker's job, maybe from a reward program:
        // no control character of theirs reaches the terminal.
        const std::string text = TerminalSafe(line.text());
        if (line.rank() != 0) {
          std::printf("[rank %d] %s\n", line.rank(), text.c_str());
        } else {
          std::printf("%s\n", text.c_str());
        }
        if (args.follow) std::fflush(stdout);
      },
      &kept);
  if (!status.ok()) return ReportRpcError("logs", status);
  ReportDropped("logs", kept, /*metrics=*/false);
  return kExitOk;
}

void AddCommon(CLI::App* command, OutputArgs* args) {
  command->add_option("id", args->id, "job id")->required();
  command->add_flag("-f,--follow", args->follow,
                    "keep streaming new lines until the job has ended");
  command->add_option("--attempt", args->attempt, "only this attempt's lines (default: every one)")
      ->check(CLI::Range(0, 1 << 30));
}

}  // namespace

void AddOutputCommands(CLI::App& app, const GlobalOptions* global, int* exit_code) {
  auto args = std::make_shared<OutputArgs>();
  CLI::App* metrics = app.add_subcommand(
      "metrics", "show a job's per-step metrics (its metrics.jsonl) from the coordinator");
  AddCommon(metrics, args.get());
  metrics
      ->add_option("-o,--output", args->output,
                   "table (default), json (the metrics.jsonl lines) or csv (a header of "
                   "every key, then rows)")
      ->check(CLI::IsMember({"table", "json", "csv"}));
  metrics->add_option("--from-step", args->from_step, "only steps from this one on")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 62));
  metrics->callback([global, args, exit_code] { *exit_code = Metrics(*global, *args); });

  CLI::App* logs = app.add_subcommand(
      "logs", "show the log lines of a job's training on its workers, from the coordinator");
  AddCommon(logs, args.get());
  logs->callback([global, args, exit_code] { *exit_code = Logs(*global, *args); });
}

}  // namespace sbp::cli
