// `kvrl transformer-eval IN.pt OUT.pt`: runs the transformer core on inputs written by
// Python and writes its outputs for comparison with the reference (tests/conformance).
#pragma once

#include <string>

namespace kvrl {

// Reads IN (a torch.save'd dict: config, state_dict, features, is_init, optional dtype),
// writes OUT: a dict with "steps", "window" when every row starts an episode, and
// "state_dict", the module's parameters by name ("transformer.in_proj.weight", ...).
// Throws MalformedInputError / InvalidArgumentError naming the bad key and what was expected.
void run_transformer_eval(const std::string& in_path, const std::string& out_path);

}  // namespace kvrl
