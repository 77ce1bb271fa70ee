// What every rank's copy of one collective must agree on, and the message when they do not.
//
// Note [Collective signatures]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every rank must issue the same collectives in the same order. When ranks take different
// code paths (a module called a different number of times on one rank, a branch on rank-local
// data, a backward skipped on one rank), their collectives stop matching: in DeepSpeed this is
// the most reported ZeRO-3 failure, and it hangs until a timeout that names the wrong thing,
// or, where the mismatched collectives happen to move the same number of bytes (two blocks of
// one size gathered in swapped order), it completes and trains on the wrong parameters.
//   - Each collective carries a signature: its kind and group, its buffers' element counts and
//     dtypes, its counts and root, and what it is for (CollectiveOptions::label, e.g. the
//     stage-3 unit and the pass), in text, with a 64-bit hash of that text. No rank number is
//     in it: equal calls have equal signatures on every rank.
//   - Before a collective's data moves, the ranks compare signatures (the MPI backend: one
//     MPI_Allreduce of the hash and its complement under MIN, 16 bytes, on the collective's
//     thread). Equal: the collective runs. Different: every rank has seen it in the same
//     exchange, so every rank stops there: the texts are gathered and each rank throws one
//     zero::Error naming the collective's number and what each rank issued, and the
//     communicator refuses everything after it (the ranks' sequences have parted).
//   - Exchanges pair up by their order on every rank, so the first collective where any two
//     ranks differ is the one reported, whatever the collectives' sizes. A rank that stops
//     issuing collectives altogether is no mismatch: Note [Collective timeout] names it.
//   - ZERO_COLLECTIVE_CHECKS=0 turns the exchange off (docs/benchmarks.md, "Collective
//     signatures", has its cost per step). The NCCL backend does not check (its collectives
//     run on a stream; a CPU-side exchange would synchronize it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/collective_call.h"

namespace zero::comm {

struct CollectiveSignature {
  std::string text;   // "all_gather (16 elements of Float; label)": what every rank shares
  uint64_t hash = 0;  // FNV-1a of text
};

/// The signature of `call` (its op name carries the group) with `label` (may be empty).
ZERO_INTERNAL_API CollectiveSignature signature_of(const Call& call, const std::string& label);

/// The error text when collective `number` (1, 2, ... on this communicator) had the given
/// signature texts, one per rank in rank order: each distinct text once, with its ranks.
ZERO_INTERNAL_API std::string mismatch_message(const std::string& backend, int64_t number,
                                               const std::vector<std::string>& texts);

}  // namespace zero::comm
