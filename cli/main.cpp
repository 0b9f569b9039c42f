// actkit: the command-line front end. Each subcommand lives in its own file
// and registers itself in main().
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/csrc/api/include/torch/version.h>

#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <new>
#include <thread>

#include "actkit/process/process.h"
#include "actkit/comm/group_config.h"
#include "actkit/core/errors.h"
#include "actkit/core/version.h"
#include "cli_util.h"
#include "commands.h"

namespace {

std::string version_text() {
  std::string cuda = "no";
#if defined(ACTKIT_WITH_CUDA)
  cuda = at::hasCUDA() ? "yes" : "built, no device";
#endif
  return std::string("actkit ") + actkit::kVersion + " (LibTorch " + TORCH_VERSION + ", CUDA kernels: " + cuda + ")";
}

}  // namespace

int main(int argc, char** argv) {
  // A rank started by `actkit dp` / `actkit pipeline` ends with its launcher.
  actkit::end_with_parent();
  // A rank writing to a peer that just died gets EPIPE (and names the peer),
  // not a SIGPIPE that kills it and blurs which rank failed first.
  if (actkit::GroupConfig::in_env()) std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"ACTkit: activation-compressed training, offload and compressed communication on LibTorch",
               "actkit"};
  app.set_version_flag("--version", version_text());
  // LibTorch sizes its pool by the physical cores it detects, which on
  // virtual machines is often 1; use every core unless told otherwise.
  int threads = std::getenv("OMP_NUM_THREADS") ? 0 : int(std::thread::hardware_concurrency());
  // More threads than cores only contend; far more exhausts the process's limits.
  app.add_option("--threads", threads, "LibTorch intra-op threads (default: all cores, or OMP_NUM_THREADS)")
      ->check(CLI::Range(0, 1024));
  app.parse_complete_callback([&threads] {
    if (threads > 0) at::set_num_threads(threads);
  });
  app.require_subcommand(1);
  actkit::cli::add_bench_commands(app);
  actkit::cli::add_model_commands(app);
  actkit::cli::add_train_command(app);
  actkit::cli::add_generate_command(app);
  actkit::cli::add_maxbatch_command(app);
#if defined(ACTKIT_WITH_DISTRIBUTED)
  actkit::cli::add_pipeline_command(app);
  actkit::cli::add_dp_command(app);
#endif
  actkit::cli::command_line().assign(argv + 1, argv + argc);
  // An error printed, and noted for a launcher that started this process
  // (the time an ACTkit error was raised; others, when it was caught here).
  const auto fail = [](const std::string& message, std::chrono::system_clock::time_point raised, int status) {
    std::cerr << "actkit: " << (status == 1 ? "error: " : "unexpected error: ") << message << "\n";
    actkit::note_error(message, raised);
    return status;
  };
  const auto caught = [] { return std::chrono::system_clock::now(); };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const actkit::Error& e) {
    return fail(e.what(), e.raised_at(), 1);
  } catch (const std::bad_alloc&) {
    return fail("out of memory (a smaller batch, model or count asks for less)", caught(), 1);
  } catch (const c10::Error& e) {
    // LibTorch's message without its backtrace; a failed allocation says so.
    const std::string message = e.what_without_backtrace();
    if (message.find("can't allocate memory") != std::string::npos ||
        message.find("out of memory") != std::string::npos) {
      return fail("out of memory (a smaller batch, model or count asks for less): " + message, caught(), 1);
    }
    return fail(message, caught(), 2);
  } catch (const std::exception& e) {
    return fail(e.what(), caught(), 2);
  }
  return 0;
}
