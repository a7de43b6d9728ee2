// sbp: the command-line client of the StreamBP runtime.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "common/version.h"
#include "kernels/device_info.h"

int main(int argc, char** argv) {
  CLI::App app{"sbp: exact long-sequence training with StreamBP"};
  app.set_version_flag("--version",
                       [] { return std::string("sbp ") + sbp::kVersion + "\n" +
                                   sbp::CudaSupportSummary(); });
  app.require_subcommand(0);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (argc == 1) {
    std::printf("%s", app.help().c_str());
  }
  return 0;
}
