// `kvrl transformer-demo`: steps a batch of streams through the cached path, then runs
// the window path over what was recorded, and reports both speeds and their agreement.
// It is the main job until the training loop lands.
#pragma once

#include <string>
#include <vector>

namespace kvrl {

// args: [--envs N] [--steps T] [--seed S]. Returns the exit code: 0 when the two paths
// agree within 1e-4, 1 otherwise. Throws InvalidArgumentError on a bad argument.
struct DemoArguments;

int run_transformer_demo(const DemoArguments& arguments);

}  // namespace kvrl
