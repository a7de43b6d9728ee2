// sbp: the command-line client of the StreamBP runtime.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "client/bench_command.h"
#include "client/cli_common.h"
#include "client/grad_command.h"
#include "client/model_command.h"
#include "client/train_command.h"
#include "common/version.h"
#include "kernels/device_info.h"

int main(int argc, char** argv) {
  CLI::App app{"sbp: exact long-sequence training with StreamBP"};
  app.set_version_flag("--version", [] {
    return std::string("sbp ") + sbp::kVersion + "\n" + sbp::CudaSupportSummary();
  });
  int exit_code = sbp::cli::kExitOk;
  sbp::cli::AddModelCommand(app, &exit_code);
  sbp::cli::AddGradCommand(app, &exit_code);
  sbp::cli::AddBenchCommand(app, &exit_code);
  sbp::cli::AddTrainCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? sbp::cli::kExitOk : sbp::cli::kExitBadInput;
  }
  if (argc == 1) std::printf("%s", app.help().c_str());
  return exit_code;
}
