// --mode=predict: the logits of every image of --val_data (with --eval_views=2 or 10 the log
// of the views' mean probabilities) gathered in dataset order and written to
// --predictions (docs/OPERATIONS.md §8 for the file's rules).
#pragma once

#include <string>

#include "apps/train_setup.h"

namespace colonnade {

// Runs the prediction pass of the checkpoint at `checkpoint_path` and writes the file;
// returns the exit code. Collective over the world.
int RunPredict(Job& job, const std::string& checkpoint_path);

}  // namespace colonnade
