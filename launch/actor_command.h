// `kvrl actor CONFIG.yaml --connect HOST:PORT --token-file FILE [key=value ...]`: an actor
// outside the MPI job that joins a running training over TCP (learner 0's remote.port),
// acts until the learners stop, or until it is stopped or loses the connection, and may be
// started again at any time (docs/reliability.md "Elastic actors"). The config must define
// the same model, environment and actor keys as the training's (its hash is checked at the
// handshake); the devices, threads and environment stepping are the actor's own.
#pragma once

namespace kvrl {

// Exit code when the connection to learner 0 was lost mid-run (the training may go on).
inline constexpr int kRemoteActorDisconnected = 6;

struct RemoteActorArguments;

// Returns the process exit code: 0 when the learners stopped the run, kTrainInterrupted
// when stopped by a signal, kRemoteActorDisconnected when the connection was lost.
int run_remote_actor(const RemoteActorArguments& arguments);

}  // namespace kvrl
