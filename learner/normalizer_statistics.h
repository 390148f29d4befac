// What the learners feed the policy's normalisers after each batch: the statistics of
// the steps' observations and of their discounted returns, combined over every learner
// so that all learners (and, through the weights, all actors) hold the same normaliser.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

#include "common/model/running_moments.h"
#include "common/wire/episode.h"

namespace kvrl {

class Communicator;

// The statistics of every learner's rows together ([N_i, D] on learner i; N_i may be 0),
// rows with a non-finite value left out. A collective: every learner calls it, reducing
// on its `device`. One learner: exact in float64; several: the count in float64, the sums
// and then the squares about the common mean averaged in float32.
BatchMoments all_learner_moments(const at::Tensor& rows, Communicator& communicator, c10::Device device);

// [N, observation_size]: the observations of the episodes' steps (not their context
// prefixes, which their own fragments counted).
at::Tensor step_observations(const std::vector<Episode>& episodes, int64_t observation_size);

// [N, 1]: each step's return so far, discounted: G_t = gamma * G_{t-1} + r_t, from 0 at
// the piece's first step. Gymnasium's NormalizeReward starts from 0 at the episode's (and
// carries on over truncations): a fragment that continues an episode restarts the sum, so
// with fragments shorter than the discount's horizon the return's std comes out smaller
// and the rewards are scaled up (about 1.5x for 64-step fragments at gamma 0.99 and a
// constant reward, docs/training.md). Fragments carry no discounted return to continue from.
at::Tensor discounted_returns(const std::vector<Episode>& episodes, double gamma);

}  // namespace kvrl
