// Names the culprit of a hang: when an operation of a process group times out (or its
// transport fails), which peers never reached it, by global and group rank.
//
// A backend (gloo_communicator.cc, nccl_communicator.cc) keeps one GroupWatchdog per
// group. It numbers the group's operations (NextCollective, NextSend, NextRecv) and, when
// one fails, passes the failure through Explain:
//
//   GroupOperation op = watchdog.NextCollective("AllReduce");
//   ... the transport times out ...
//   return watchdog.Explain(op, absl::DeadlineExceededError(...), gloo_text, is_aborted);
//
// which returns, e.g.
//
//   AllReduce #57 in group data-2 (ranks 2,6,10) did not complete within 5s; did not
//   arrive: global rank 6 (group rank 1): no watchdog report within 3s (hung, dead or
//   behind)
//
// How it tells: on its group's first failure a member publishes one report to the
// rendezvous store the group was created with. After a timeout or a transport failure it
// also waits, at most GroupSpec::watchdog_wait (and never longer than the group's
// timeout), for the reports of the peers the operation needed: every other member for a
// collective, the peer for a point-to-point message. Members stuck in the same collective
// time out at about the same moment (or fail with UNAVAILABLE at their next transfer to
// one whose timeout closed its connections) and report too; a member that is stopped
// (SIGSTOP), dead, or still busy somewhere else does not, and is named. A peer that failed
// in another operation of the group is named with that operation ("timed out in Recv #3
// from ..."). If everyone reported, the message says so: the transport, not a member, is
// to blame. A member whose point-to-point peer did report names what that peer was doing
// ("the peer reported: ..."): a deadlock, or the next link of a chain of waits.
//
// A member that failed with UNAVAILABLE in a collective that another member reported
// timing out in (that member's timeout closed its connections) returns DEADLINE_EXCEEDED
// too: the operation's real failure is the timeout, and every member then names the
// missing ones.
//
// Numbering: collectives are numbered 1, 2, ... in the order this member calls them. Every
// member calls a group's collectives in the same order, so AllReduce #57 is the same
// operation on every member. Point-to-point messages are numbered per peer and direction:
// "Send #3 to B" is this member's third message to B, which B receives as "Recv #3 from A"
// when the pair uses its tags in order.
//
// Store layout: one key per member and group, "<group name>/watchdog/<group rank>" (a
// member fails at most once in a group: after any failure the group is unusable). The
// value is five lines: the status code as a number, the verb, the operation's number, the
// peer's group rank (-1 for a collective) and the rest of the operation's text, e.g.
// "4\nAllReduce\n57\n-1\n" for a timeout in AllReduce #57. Nothing touches the store
// before a failure, so a healthy run never pays for the watchdog.
//
// Thread-safety: one thread at a time, as the group itself (Communicator); `aborted` may
// be set from another thread.
#ifndef MTRAIN_WORKER_PARALLEL_GROUP_WATCHDOG_H_
#define MTRAIN_WORKER_PARALLEL_GROUP_WATCHDOG_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {

// One operation of one member, as error messages and watchdog reports name it.
struct GroupOperation {
  std::string verb;     // "AllReduce", "Broadcast", "Send", "Recv"
  uint64_t number = 0;  // see "Numbering" in the file comment
  std::string rest;     // " from group rank 1 (global rank 6) with tag 5"; may be empty
  int peer = -1;        // point to point: the peer's group rank; -1 for a collective

  bool collective() const { return peer < 0; }
  // "Recv #3 from group rank 1 (global rank 6) with tag 5".
  std::string Text() const;
  bool operator==(const GroupOperation& other) const;
};

class GroupWatchdog {
 public:
  // `spec` must have passed GroupRankOf; `rank` is the caller's group rank. `store` may
  // be null, and spec.watchdog_wait zero: then failures are explained from this member's
  // side only. Otherwise `store` must outlive this object.
  GroupWatchdog(KeyValueStore* store, const GroupSpec& spec, int rank);

  GroupWatchdog(const GroupWatchdog&) = delete;
  GroupWatchdog& operator=(const GroupWatchdog&) = delete;

  // The next collective: `verb` #n, n counting from 1. `rest` follows the number in the
  // text, e.g. " from group rank 0" for a broadcast.
  GroupOperation NextCollective(const std::string& verb, const std::string& rest = "");
  // The next message to (from) group rank `peer`, with its tag in the text.
  GroupOperation NextSend(int peer, uint64_t tag);
  GroupOperation NextRecv(int peer, uint64_t tag);

  // "group rank 1 (global rank 6)": how operations name a peer.
  std::string PeerText(int peer) const;

  // Explains the failure of `op` that made the group unusable, and returns the status the
  // operation should return: `failure` with the watchdog's verdict and then `detail` (the
  // transport's own words; may be empty) appended to its message. Publishes this member's
  // report on the group's first failure only; later calls return `failure` (plus detail)
  // at once. Waits for the peers' reports only when `failure` is DEADLINE_EXCEEDED or
  // UNAVAILABLE; an abort or a refused message is reported without waiting, so that peers
  // waiting for this member learn what became of it. A failing store never turns into a
  // crash or a different code: the message then says why the watchdog could not tell.
  // `aborted` (may be empty) is polled while waiting: an Abort cuts the wait short.
  absl::Status Explain(const GroupOperation& op, const absl::Status& failure,
                       absl::string_view detail, const std::function<bool()>& aborted);

 private:
  std::string KeyOf(int rank) const;
  std::string MemberText(int rank) const;  // "global rank 6 (group rank 1)"

  KeyValueStore* const store_;
  const std::string key_prefix_;    // "<group name>/watchdog/"
  const std::string display_name_;  // "data-2 (ranks 2,6,10)"
  const std::vector<int> members_;
  const int rank_;
  const absl::Duration timeout_;
  const absl::Duration wait_;  // min(spec.watchdog_wait, spec.timeout)

  uint64_t collectives_ = 0;
  std::vector<uint64_t> sends_to_;    // per peer
  std::vector<uint64_t> recvs_from_;  // per peer
  std::atomic<bool> reported_{false};
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_GROUP_WATCHDOG_H_
