// What the learners feed the policy's normalisers after each batch: the statistics of
// the steps' observations and of their discounted returns, combined over every learner
// so that all learners (and, through the weights, all actors) hold the same normaliser.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "common/model/running_moments.h"
#include "common/wire/episode.h"

namespace kvrl {

class Communicator;

// The statistics of every learner's rows together ([N_i, D] on learner i; N_i may be 0).
// A collective: every learner calls it. One learner: exact in float64; several: the
// counts and sums, then the squares about the common mean, averaged in float32.
BatchMoments all_learner_moments(const at::Tensor& rows, Communicator& communicator);

// [N, observation_size]: the observations of the episodes' steps (not their context
// prefixes, which their own fragments counted).
at::Tensor step_observations(const std::vector<Episode>& episodes, int64_t observation_size);

// [N, 1]: each step's return so far, discounted: G_t = gamma * G_{t-1} + r_t, from 0 at
// the piece's first step (Gymnasium's NormalizeReward starts from 0 at the episode's: a
// fragment that continues an episode restarts the sum, which the variance barely notices).
at::Tensor discounted_returns(const std::vector<Episode>& episodes, double gamma);

}  // namespace kvrl
