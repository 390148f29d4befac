// `kvrl transformer-eval IN.pt OUT.pt`: runs the transformer core on inputs written by
// Python and writes its outputs for comparison with the reference (tests/conformance).
#pragma once

#include <string>

namespace kvrl {

// Reads IN (a torch.save'd dict: config, state_dict, features, is_init, optional dtype),
// writes OUT: a dict with "steps", "window" when every row starts an episode, and
// "state_dict", the module's parameters by name ("transformer.in_proj.weight", ...).
// Optional inputs: "window_grad" [B, T, hidden] adds "window_grads", the parameter
// gradients of sum(window * window_grad) by name; "program", a list of segments (features,
// is_init, "before": actions among reset_cache, mark_weight_update, load_state_dict,
// assign_data with a "state_dict", optional "autocast": "bfloat16") stepped after the first
// steps on the same cache, adds "program_steps", one [B, T, hidden] tensor per segment.
// Throws MalformedInputError / InvalidArgumentError naming the bad key and what was expected.
void run_transformer_eval(const std::string& in_path, const std::string& out_path);

}  // namespace kvrl
