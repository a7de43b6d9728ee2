// sbp: the command-line client of the StreamBP runtime.
#include <csignal>
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "client/bench_command.h"
#include "client/cli_common.h"
#include "client/coordinator_client.h"
#include "client/data_command.h"
#include "client/export_command.h"
#include "client/generate_command.h"
#include "client/grad_command.h"
#include "client/health_command.h"
#include "client/job_commands.h"
#include "client/lora_command.h"
#include "client/metrics_client.h"
#include "client/model_command.h"
#include "client/output_commands.h"
#include "client/plan_command.h"
#include "client/plot_command.h"
#include "client/run_command.h"
#include "client/train_command.h"
#include "common/version.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu/openblas_core.h"
#include "kernels/device_info.h"

int main(int argc, char** argv) {
  // A peer that goes away mid-write (a collective of `sbp run`'s workers, a
  // closed pipe) must surface as an error, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  sbp::cpu::PrepareOpenBlas(argv);
  CLI::App app{"sbp: exact long-sequence training with StreamBP"};
  app.set_version_flag("--version", [] {
    return std::string("sbp ") + sbp::kVersion + "\n" + sbp::CudaSupportSummary() +
           "\nblas: " + sbp::cpu::BlasSummary();
  });
  // Global flags may come before or after the verb (`sbp --coordinator X list`
  // or `sbp list --coordinator X`).
  app.fallthrough();
  sbp::cli::GlobalOptions global;
  app.add_option("--coordinator", global.coordinator, "coordinator address host:port")
      ->envname("SBP_COORDINATOR")
      ->capture_default_str();
  app.add_option("--token-file", global.token_file,
                 "file with the client bearer token (default: $SBP_TOKEN)");
  app.add_option("--tls-ca", global.tls_ca, "PEM roots: connect to the coordinator with TLS");
  int exit_code = sbp::cli::kExitOk;
  sbp::cli::AddJobCommands(app, &global, &exit_code);
  sbp::cli::AddOutputCommands(app, &global, &exit_code);
  sbp::cli::AddHealthCommand(app, &global, &exit_code);
  sbp::cli::AddRunCommand(app, &exit_code);
  sbp::cli::AddModelCommand(app, &exit_code);
  sbp::cli::AddGradCommand(app, &exit_code);
  sbp::cli::AddGenerateCommand(app, &exit_code);
  sbp::cli::AddBenchCommand(app, &exit_code);
  sbp::cli::AddPlanCommand(app, &exit_code);
  sbp::cli::AddTrainCommand(app, &exit_code);
  sbp::cli::AddDataCommand(app, &exit_code);
  sbp::cli::AddLoraCommand(app, &exit_code);
  sbp::cli::AddPlotCommand(app, &exit_code, sbp::cli::CoordinatorMetricsSource(&global));
  sbp::cli::AddExportCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? sbp::cli::kExitOk : sbp::cli::kExitBadInput;
  }
  if (argc == 1) std::printf("%s", app.help().c_str());
  return exit_code;
}
