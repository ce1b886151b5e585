// trainer: trains, evaluates or predicts with a Colonnade model, on one process or many
// (mpirun / srun). Every flag is explained by --help; docs/OPERATIONS.md has the recipes.
#include <mpi.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "apps/cli.h"
#include "apps/exit_codes.h"
#include "apps/train_session.h"
#include "apps/trainer_flags.h"
#include "checkpoint/signals.h"
#include "core/models.h"
#include "parallel/mesh.h"

// Every flag, from the one table of trainer_flags.h (its group, type, default, range and
// help): the Abseil flags here, TrainConfig's fields in train_config.h.
#define COLONNADE_DEFINE_FLAG(group, type, name, def, range, help) \
  ABSL_FLAG(type, name, def, colonnade::TrainerFlagHelp(#name, help));
COLONNADE_TRAINER_FLAGS(COLONNADE_DEFINE_FLAG)
#undef COLONNADE_DEFINE_FLAG

namespace colonnade {
namespace {

// The parsed flags as a TrainConfig, field by field from the same table.
TrainConfig ConfigFromFlags(int argc, char** argv) {
  TrainConfig c;
#define COLONNADE_COPY_FLAG(group, type, name, def, range, help) \
  c.name = absl::GetFlag(FLAGS_##name);                          \
  if (FlagGiven(argc, argv, #name)) c.given.push_back(#name);
  COLONNADE_TRAINER_FLAGS(COLONNADE_COPY_FLAG)
#undef COLONNADE_COPY_FLAG
  for (int i = 1; i < argc; ++i) absl::StrAppend(&c.flags_text, argv[i], "\n");
  return c;
}

// --help --model=NAME: the model named on the command line resolves the recipe defaults.
std::string ModelOnCommandLine(const std::vector<std::string>& args) {
  absl::StatusOr<std::vector<FlagArg>> flags = ResolveFlags(args, nullptr);
  if (flags.ok()) {
    for (const FlagArg& f : *flags)
      if (f.name == "model") return f.value;
  }
  return absl::GetFlag(FLAGS_model);
}

}  // namespace
}  // namespace colonnade

int main(int argc, char** argv) {
  // The stop handlers come first: MPI_Init alone can take a second, and a SIGTERM then
  // (a job cancelled as it starts) must end the trainer with the documented 75 and a note,
  // not the default action's silent 143 (docs/OPERATIONS.md §4, scripts/slurm/train.sbatch).
  if (absl::Status s = colonnade::checkpoint::InstallStopSignalHandlers(); !s.ok()) {
    std::fprintf(stderr, "trainer: error: %s\n", std::string(s.message()).c_str());
    return colonnade::kExitError;
  }
  colonnade::checkpoint::ExitOnStopSignal("trainer", "before training started (nothing to save)",
                                          colonnade::kExitPreempted);
  if (absl::Status s = colonnade::InitMpi(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "trainer: error: %s\n", std::string(s.message()).c_str());
    return colonnade::kExitError;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  colonnade::Cli cli = {
      "trainer", "src/apps/trainer",
      absl::StrCat(
          "trains a convolutional network.\n\n"
          "  trainer --model=cifar10-80sec --data=synthetic --device=cpu --steps=200\n"
          "  mpirun -np 8 trainer --model=alexnet --mp=2 --data=/scratch/imagenet-shards\n\n"
          "Known models: ",
          colonnade::KnownModels(),
          ".\nExit codes: 0 done, 1 runtime error, 2 usage error, 3 loss became NaN/Inf, "
          "4 --checkpoint_dir locked by another job, 5 a rank stopped answering "
          "(--collective_timeout), 75 stopped by a signal (SIGTERM, "
          "SIGUSR1, SIGINT): after a checkpoint once training has started, at once before "
          "that; requeue and resume."),
      colonnade::TrainerFlagRanges()};
  cli.print_help = [&cli](const std::vector<std::string>& args) {
    colonnade::PrintTrainerHelp(std::cout, cli.usage, colonnade::ModelOnCommandLine(args));
  };
  // Every rank reads the same command line; rank 0 alone explains it.
  if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, cli, rank == 0)) {
    colonnade::FinalizeMpi();
    return *code;
  }

  const colonnade::TrainConfig c = colonnade::ConfigFromFlags(argc, argv);

  // Numeric flags were checked against their ranges and the closed sets of words (--mode,
  // --device, --comm, --mean) parsed into enums with the command line; --resume is open.
  if (c.resume.empty()) {
    if (rank == 0) colonnade::UsageError(cli, "--resume must be auto, none or a checkpoint path");
    colonnade::FinalizeMpi();
    return colonnade::kExitUsage;
  }

  const int code = colonnade::RunTrainer(c);
  // The outcome is decided; a launcher's SIGTERM while the ranks finalise changes nothing.
  colonnade::checkpoint::ExitQuietlyOnStopSignal(code);
  colonnade::FinalizeMpi();
  return code;
}
