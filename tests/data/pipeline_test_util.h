// What the pipeline suites (pipeline_test.cc, recipe_augment_test.cc) share.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "data/pipeline.h"
#include "gtest/gtest.h"

namespace colonnade::data {

// The first `n` batches of a pipeline over `ds` with options `o`, from `start`; a failure to
// create the pipeline or to read a batch fails the test and ends the list there.
inline std::vector<Batch> Take(Dataset* ds, const PipelineOptions& o, int n, Cursor start = {}) {
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds, o, start);
  EXPECT_TRUE(p.ok()) << p.status();
  std::vector<Batch> out;
  if (!p.ok()) return out;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<Batch> b = (*p)->Next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) break;
    out.push_back(std::move(*b));
  }
  return out;
}

}  // namespace colonnade::data
