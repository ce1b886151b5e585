// Helpers shared by the model-zoo builders (models.cc, zoo_imagenet.cc): parameter
// structs from the numbers a paper's table gives, the input blobs, and the loss.
#pragma once

#include <memory>
#include <string>

#include "core/models.h"
#include "core/ops.h"

namespace colonnade {
namespace zoo {

ConvParams Conv(int kernel, int stride, int pad, int groups = 1);
PoolParams Pool(PoolParams::Kind kind, int size, int stride, int pad = 0);

// A Net named `name` with the zoo's inputs: "data" (C x S x S) and "label" (1 x 1 x 1).
std::unique_ptr<Net> NewNet(const std::string& name, const ModelOptions& o);

// The softmax loss on kLogitsBlob and "label", writing "loss" and "probs".
void AddLoss(Net& net);

}  // namespace zoo
}  // namespace colonnade
