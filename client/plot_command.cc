#include "client/plot_command.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cli_common.h"
#include "client/plot/chart.h"
#include "client/plot/png_chart.h"
#include "client/plot/png_file.h"
#include "client/plot/series.h"
#include "client/plot/terminal_chart.h"
#include "common/status_macros.h"
#include "worker/model/file_util.h"

namespace sbp::cli {
namespace {

constexpr int kDefaultWidth = 900;
constexpr int kDefaultHeight = 540;       // one metric
constexpr int kDefaultPanelHeight = 300;  // each of several

struct PlotOptions {
  std::string target;
  std::string out;
  int width = kDefaultWidth;
  int height = 0;  // 0: by the number of metrics
  std::vector<std::string> metrics = {"loss"};
  bool log_y = false;
  bool terminal = false;
  int rows = 10;
};

// The terminal's width: stdout's window size, else $COLUMNS, else 80.
int TerminalColumns() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* env = std::getenv("COLUMNS"); env != nullptr && std::atoi(env) > 0) {
    return std::atoi(env);
  }
  return 80;
}

absl::Status CheckSize(const PlotOptions& o, int height) {
  const int panels = static_cast<int>(o.metrics.size());
  if (o.width < plot::kMinPngWidth || o.width > plot::kMaxPngSide) {
    return absl::InvalidArgumentError(absl::StrCat("--width ", o.width, ": must be ",
                                                   plot::kMinPngWidth, " to ", plot::kMaxPngSide,
                                                   " pixels"));
  }
  if (height < plot::kMinPngPanelHeight * panels || height > plot::kMaxPngSide) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--height ", height, ": must be ", plot::kMinPngPanelHeight * panels, " to ",
        plot::kMaxPngSide, " pixels for ", panels, panels == 1 ? " metric" : " metrics"));
  }
  return absl::OkStatus();
}

absl::StatusOr<plot::MetricsLines> Fetch(const std::string& target,
                                         const plot::JobMetricsSource& job_metrics) {
  if (plot::LooksLikePath(target)) return plot::ReadRunMetrics(target);
  if (job_metrics) {
    absl::StatusOr<plot::MetricsLines> lines = job_metrics(target);
    if (lines.ok()) return lines;
    // Say both readings, so a mistyped directory is not only a gRPC error.
    return absl::Status(lines.status().code(),
                        absl::StrCat("'", target, "' is no run directory here, and as a job id: ",
                                     lines.status().message()));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("'", target,
                   "' is no run directory here, and job ids need the coordinator's metrics "
                   "(not yet): give a run directory (runs/<id>)"));
}

// Notes on stderr about what was left out.
void ReportSkipped(const plot::MetricsLines& lines, const plot::ParsedMetrics& parsed,
                   const plot::Chart& chart) {
  if (parsed.malformed > 0) {
    std::fprintf(stderr, "sbp plot: skipped %lld malformed line%s of %s (the first: line %lld)\n",
                 static_cast<long long>(parsed.malformed), parsed.malformed == 1 ? "" : "s",
                 lines.origin.c_str(), static_cast<long long>(parsed.first_malformed_line));
  }
  if (parsed.non_finite > 0) {
    std::fprintf(stderr, "sbp plot: left out %lld non-finite value%s (NaN, inf)\n",
                 static_cast<long long>(parsed.non_finite), parsed.non_finite == 1 ? "" : "s");
  }
  if (chart.dropped_non_positive > 0) {
    std::fprintf(stderr, "sbp plot: left out %lld value%s <= 0 (--log-y)\n",
                 static_cast<long long>(chart.dropped_non_positive),
                 chart.dropped_non_positive == 1 ? "" : "s");
  }
}

absl::Status WritePng(const plot::Chart& chart, const PlotOptions& o, int height) {
  ASSIGN_OR_RETURN(const plot::PngChart drawn, plot::DrawPngChart(chart, o.width, height));
  ASSIGN_OR_RETURN(const std::string bytes, plot::EncodePng(drawn.image));
  if (absl::Status written = WriteFileAtomically(o.out, bytes); !written.ok()) {
    return absl::Status(written.code(), absl::StrCat("--out ", o.out, ": ", written.message()));
  }
  std::string what;
  for (const plot::Panel& p : chart.panels) {
    absl::StrAppend(&what, what.empty() ? "" : ", ", p.main.name, " ", p.main.points.size(),
                    " points");
    if (!p.eval.points.empty()) {
      absl::StrAppend(&what, ", ", p.eval.name, " ", p.eval.points.size(), " points");
    }
  }
  std::printf("wrote %s (%dx%d PNG): %s\n", o.out.c_str(), o.width, height, what.c_str());
  return absl::OkStatus();
}

absl::Status Plot(const PlotOptions& o, const plot::JobMetricsSource& job_metrics) {
  const int panels = static_cast<int>(o.metrics.size());
  const int height =
      o.height > 0 ? o.height : (panels == 1 ? kDefaultHeight : kDefaultPanelHeight * panels);
  if (!o.out.empty()) RETURN_IF_ERROR(CheckSize(o, height));
  if (o.rows < 2 || o.rows > 200) {
    return absl::InvalidArgumentError(absl::StrCat("--rows ", o.rows, ": must be 2 to 200"));
  }
  ASSIGN_OR_RETURN(const plot::MetricsLines lines, Fetch(o.target, job_metrics));
  const plot::ParsedMetrics parsed =
      plot::ParseMetricsLines(lines.lines, plot::FieldsFor(o.metrics));
  if (parsed.records == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(lines.origin, ": none of its ", lines.lines.size(),
                     " lines is a metrics record (a JSON object with a numeric \"step\")"));
  }
  ASSIGN_OR_RETURN(const plot::Chart chart,
                   plot::BuildChart(lines.run_name, lines.origin, o.metrics, parsed, o.log_y));
  ReportSkipped(lines, parsed, chart);
  if (!o.out.empty()) RETURN_IF_ERROR(WritePng(chart, o, height));
  if (o.out.empty() || o.terminal) {
    plot::TerminalOptions t;
    t.columns = TerminalColumns();
    t.rows = o.rows;
    t.color = isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
    std::fputs(plot::RenderTerminalChart(chart, t).c_str(), stdout);
  }
  return absl::OkStatus();
}

}  // namespace

void AddPlotCommand(CLI::App& app, int* exit_code, plot::JobMetricsSource job_metrics) {
  auto o = std::make_shared<PlotOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plot", "draw a run's loss curve (and eval loss): a PNG with --out, else in the terminal");
  cmd->add_option("target", o->target, "run directory (holding metrics.jsonl) or job id")
      ->required();
  cmd->add_option("--out", o->out, "write the chart as a PNG file");
  cmd->add_option("--width", o->width, "PNG width in pixels")->capture_default_str();
  cmd->add_option("--height", o->height,
                  "PNG height in pixels (default 540, or 300 per metric for several)");
  cmd->add_option("--metric", o->metrics,
                  "metrics.jsonl fields to plot, one panel each (eval_<name> joins <name>): "
                  "loss, grad_norm, lr, reward_mean, ...")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--log-y", o->log_y, "logarithmic value axis");
  cmd->add_flag("--terminal", o->terminal, "also draw the chart on stdout when writing --out");
  cmd->add_option("--rows", o->rows, "terminal chart height in text rows")->capture_default_str();
  cmd->callback([o, exit_code, job_metrics = std::move(job_metrics)] {
    const absl::Status status = Plot(*o, job_metrics);
    *exit_code = status.ok() ? kExitOk : ReportError("plot", status);
  });
}

}  // namespace sbp::cli
